#!/usr/bin/env bash
# Builds llama.cpp targets (llama-server, the training examples, ...) from the source node-llama-cpp ships
# (node_modules/node-llama-cpp/llama/gitRelease.bundle), once per machine: the build lives outside the
# repository, keyed by the bundle's commit (and by the patch set, when one is given), so later runs and
# later clones skip it. A lock makes concurrent callers (CI, a test's setup, `npm run train-demo`) wait
# for one build instead of racing in the same folder.
#
#   scripts/llama-cpp-build.sh [--patches DIR] TARGET...
#   scripts/llama-cpp-build.sh --program DIR
#   scripts/llama-cpp-build.sh --source
#
# --program builds a CMake project of this repository (DIR, e.g. training/trainer) against that build's static
# ggml (LLAMA_CPP_SOURCE and LLAMA_CPP_BUILD are passed to it), keyed by the commit and DIR's content, so editing
# the program relinks it in seconds and never rebuilds llama.cpp.
#
# --source builds nothing: it prints the folder of that llama.cpp's source (its Python converters, e.g.
# convert_lora_to_gguf.py, which the Gemma pipeline's import cross-check runs).
#
# Prints the folder holding the built binaries on its last line of stdout; build logs go to stderr.
# WEACT_LLAMA_CPP_CACHE overrides the cache folder (default: $XDG_CACHE_HOME or ~/.cache, /weact-mcp/llama.cpp).
set -euo pipefail

patches=""
program=""
source_only=""
if [ "${1:-}" = "--source" ] && [ $# -eq 1 ]; then
  source_only=1
  shift
elif [ "${1:-}" = "--patches" ]; then
  patches="$(cd "$2" && pwd)"
  shift 2
elif [ "${1:-}" = "--program" ] && [ $# -eq 2 ]; then
  program="$(cd "$2" && pwd)"
  shift 2
fi
if [ $# -eq 0 ] && [ -z "$program" ] && [ -z "$source_only" ]; then
  echo "usage: $0 [--patches DIR] TARGET... | $0 --program DIR | $0 --source" >&2
  exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/node_modules/node-llama-cpp/llama/gitRelease.bundle"
[ -f "$bundle" ] || { echo "$bundle is missing: run npm ci first" >&2; exit 1; }
for tool in git cmake g++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool is required to build llama.cpp (apt-get install git cmake g++)" >&2; exit 1; }
done

commit="$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1 }' | head -n1)"
[ -n "$commit" ] || commit="$(git bundle list-heads "$bundle" | awk 'NR == 1 { print $1 }')"
key="$commit"
if [ -n "$patches" ]; then
  key="$commit-$(cat "$patches"/*.patch | sha256sum | cut -c1-12)"
fi
cache="${WEACT_LLAMA_CPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weact-mcp/llama.cpp}"
dir="$cache/$key"
mkdir -p "$cache"

exec 9>"$cache/$key.lock"
flock 9

if [ ! -f "$dir/.source-ready" ]; then
  rm -rf "$dir"
  git clone -q "$bundle" "$dir/src" >&2
  if [ -n "$patches" ]; then
    for p in "$patches"/*.patch; do git -C "$dir/src" apply "$p" >&2; done
  fi
  touch "$dir/.source-ready"
fi
if [ -n "$source_only" ]; then
  echo "$dir/src"
  exit 0
fi

jobs="$(nproc 2>/dev/null || echo 2)"
if [ ! -f "$dir/build/CMakeCache.txt" ]; then
  # static libraries: the binaries run from any folder, and a trainer linked against libllama needs no rpath
  cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON >&2
fi
if [ -n "$program" ]; then
  # the static libraries the program links, then the program itself in a folder of its own content hash
  cmake --build "$dir/build" --target ggml ggml-cpu ggml-base -j"$jobs" >&2
  sum="$(cd "$program" && find . -type f ! -path './build/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"
  out="$dir/programs/$(basename "$program")-$sum"
  if [ ! -f "$out/.built" ]; then
    cmake -S "$program" -B "$out" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CPP_SOURCE="$dir/src" -DLLAMA_CPP_BUILD="$dir/build" >&2
    cmake --build "$out" -j"$jobs" >&2
    touch "$out/.built"
  fi
  echo "$out"
  exit 0
fi
missing=()
for t in "$@"; do
  [ -x "$dir/build/bin/$t" ] || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "building ${missing[*]} from llama.cpp $commit in $dir (about 20 minutes on 2 cores, once per machine)" >&2
  cmake --build "$dir/build" --target "${missing[@]}" -j"$jobs" >&2
fi
echo "$dir/build/bin"
