#!/usr/bin/env bash
# Builds node-llama-cpp's native binding (llama-addon.node and its ggml/llama libraries) from the llama.cpp it ships
# (node_modules/node-llama-cpp/llama/gitRelease.bundle) for this machine's CPU (GGML_NATIVE=ON) with OpenMP
# (GGML_OPENMP=ON), once per machine, as an alternative to node-llama-cpp's prebuilt CPU binary (portable CPU
# variants, ggml's own thread pool). The engine loads it with model.binding "source" or "auto"
# (src/llamaCpp/startLlama.ts); the prebuilt binary stays the fallback that always works. Which is faster
# depends on the model: `npm run bench -- --scenario binding` measures both (docs/configuration.md, "The native
# binding").
#
#   scripts/node-llama-cpp-build.sh          build when missing; print the binding's folder
#   scripts/node-llama-cpp-build.sh --dir    build nothing: print the folder the build has (or would have)
#
# The same CMake project and options node-llama-cpp's own `source build` uses (node_modules/node-llama-cpp/llama:
# CMakeLists.txt and the addon's sources; dist/bindings/utils/compileLLamaCpp.js), run through its cmake-js, but in a
# folder of its own outside the repository: nothing is written into node_modules, nothing is downloaded (cmake-js
# takes the Node-API headers from node_modules/node-api-headers; npm_config_nodedir points at this Node's headers),
# and no postinstall step is involved. The folder is keyed by node-llama-cpp's version, the bundle's llama.cpp
# commit, the build options and the CPU (its model name and flags, from /proc/cpuinfo), so a changed pin, option or
# machine builds anew; `bindingKey` in src/llamaCpp/binding.ts computes the same key (a unit test holds
# the two together). Built beside its final place and renamed, so an interrupted build never counts; a lock makes
# concurrent callers wait for one build.
#
# Prints the binding's folder on its last line of stdout; build logs go to stderr.
# WEACT_NODE_LLAMA_CPP_CACHE overrides the cache folder (default: $XDG_CACHE_HOME or ~/.cache,
# /weact-mcp/node-llama-cpp), read by the server too.
set -euo pipefail

dir_only=""
if [ "${1:-}" = "--dir" ] && [ $# -eq 1 ]; then
  dir_only=1
  shift
fi
if [ $# -ne 0 ]; then
  echo "usage: $0 [--dir]" >&2
  exit 2
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
nlc="$root/node_modules/node-llama-cpp"
bundle="$nlc/llama/gitRelease.bundle"
[ -f "$bundle" ] || { echo "$bundle is missing: run npm ci first" >&2; exit 1; }
command -v git >/dev/null 2>&1 || { echo "git is required (apt-get install git)" >&2; exit 1; }

# The key. The options are the ones this script adds to node-llama-cpp's defaults (below); the text hashed here must
# stay byte for byte the one bindingKey builds. AMX is left out of the compiler flags (GCC 12's -mno-amx-tile keeps
# AMX-INT8 and AMX-BF16, so all three; in the Release flags, since cmake-js sets CMAKE_CXX_FLAGS last): a VM that lists AMX in its CPU flags without letting a process use the tiles
# dies on ggml's first AMX kernel with an illegal instruction.
options="GGML_NATIVE=ON GGML_OPENMP=ON"
cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
version="$(node -p 'require(process.argv[1]).version' "$nlc/package.json")"
commit="$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1 }' | head -n1)"
[ -n "$commit" ] || commit="$(git bundle list-heads "$bundle" | awk 'NR == 1 { print $1 }')"
if [ -r /proc/cpuinfo ]; then
  cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1); $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
else
  cpu="unknown"
fi
manifest="node-llama-cpp $version
llama.cpp $commit
options $options
cflags $cflags
platform $(node -p 'process.platform + "-" + process.arch')
cpu $cpu
"
key="$version-${commit:0:12}-$(printf '%s' "$manifest" | sha256sum | cut -c1-12)"
cache="${WEACT_NODE_LLAMA_CPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weact-mcp/node-llama-cpp}"
dir="$cache/$key"
if [ -n "$dir_only" ]; then
  echo "$dir"
  exit 0
fi

for tool in cmake g++; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool is required to build node-llama-cpp's binding (apt-get install cmake g++)" >&2; exit 1; }
done
command -v ninja >/dev/null 2>&1 || command -v make >/dev/null 2>&1 || { echo "make or ninja is required to build node-llama-cpp's binding (apt-get install make)" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/$key.lock"
flock 9

if [ ! -f "$dir/llama-addon.node" ]; then
  jobs="$(nproc 2>/dev/null || echo 2)"
  started="$(date +%s)"
  echo "node-llama-cpp-build: building node-llama-cpp $version's binding from llama.cpp ${commit:0:12} ($options) in $dir (about 9 minutes on 2 cores, once per machine)" >&2
  rm -rf "$dir".building-* # what an interrupted build left (the lock is held: no build of this key is running)
  building="$dir.building-$$"
  trap 'rm -rf "$building"' EXIT
  mkdir -p "$building/llama" "$building/out"
  # node-llama-cpp's CMake project as it ships, with the bundle cloned where its own `source build` clones it
  for item in CMakeLists.txt package.json addon cmake profiles toolchains; do
    cp -r "$nlc/llama/$item" "$building/llama/"
  done
  git -c advice.detachedHead=false clone -q "$bundle" "$building/llama/llama.cpp" >&2
  # its patches, as applyLlamaCppRepoPatches applies them (PR-22566 is skipped once llama.cpp has it)
  if ! grep -q "n_tensors = gguf_get_n_tensors(metadata);" "$building/llama/llama.cpp/src/llama-model-loader.cpp"; then
    git -C "$building/llama/llama.cpp" apply --ignore-whitespace "$nlc/llama/patches/PR-22566.diff" >&2
  fi
  release="$(node -p 'require(process.argv[1]).tag' "$nlc/llama/llama.cpp.info.json")"
  arch="$(node -p process.arch)"
  platform="$(node -p 'process.platform === "darwin" ? "mac" : process.platform === "win32" ? "win" : process.platform')"
  # CMakeLists.txt asks node for node-addon-api's headers from the project folder: resolve them from this repository
  export NODE_PATH="$root/node_modules"
  [ -d /usr/include/node ] && export npm_config_nodedir=/usr
  # compileLlamaCpp's options for a CPU build on this machine, GGML_OPENMP added
  # shellcheck disable=SC2086
  "$root/node_modules/.bin/cmake-js" compile --log-level warn --directory "$building/llama" --out "$building/build" \
    --config Release --arch="$arch" --runtime-version="$(node -p 'process.versions.node')" --parallel="$jobs" \
    --CDGGML_BUILD_NUMBER=1 --CDCMAKE_CONFIGURATION_TYPES=Release \
    --CDNLC_CURRENT_PLATFORM="$platform-$arch" --CDNLC_TARGET_PLATFORM="$platform-$arch" \
    --CDNLC_VARIANT="$release.native" --CDGGML_METAL=OFF --CDGGML_CCACHE=OFF --CDLLAMA_CURL=OFF \
    --CDLLAMA_HTTPLIB=OFF --CDLLAMA_BUILD_BORINGSSL=OFF --CDLLAMA_OPENSSL=OFF \
    $(printf -- '--CD%s ' $options) \
    "--CDCMAKE_C_FLAGS_RELEASE=-O3 -DNDEBUG $cflags" "--CDCMAKE_CXX_FLAGS_RELEASE=-O3 -DNDEBUG $cflags" >&2
  # the addon and the shared libraries beside it (it finds them through $ORIGIN), as moveBuildFilesToResultDir does
  cp -a "$building/build/Release/." "$building/out/"
  for bin in "$building/build/bin" "$building/build/llama.cpp/bin"; do
    if [ -d "$bin" ]; then cp -an "$bin/." "$building/out/"; fi
  done
  [ -f "$building/out/llama-addon.node" ] || { echo "node-llama-cpp-build: the build made no llama-addon.node" >&2; exit 1; }
  if objdump -d "$building/out/libggml-cpu.so" 2>/dev/null | grep tileloadd >/dev/null; then
    echo "node-llama-cpp-build: libggml-cpu.so still holds AMX instructions ($cflags did not reach the compiler)" >&2
    exit 1
  fi
  if ldd "$building/out/llama-addon.node" | grep -q "not found"; then
    ldd "$building/out/llama-addon.node" >&2
    echo "node-llama-cpp-build: llama-addon.node misses a library (above)" >&2
    exit 1
  fi
  # the metadata node-llama-cpp keeps beside a binding (what Llama reports as its build)
  node -e '
    const [file, release, arch, platform, options] = process.argv.slice(1);
    const customCmakeOptions = Object.fromEntries(options.split(" ").map((o) => o.split("=")));
    const buildOptions = { customCmakeOptions, progressLogs: false, platform, arch, gpu: false,
      llamaCpp: { repo: "ggml-org/llama.cpp", release } };
    require("node:fs").writeFileSync(file, JSON.stringify({ buildOptions }));
  ' "$building/out/_nlcBuildMetadata.json" "$release" "$arch" "$platform" "$options"
  printf '%s' "$manifest" >"$building/out/key.txt"
  echo "$(($(date +%s) - started))" >"$building/out/build-seconds"
  rm -rf "$dir"
  mv "$building/out" "$dir"
  rm -rf "$building"
  trap - EXIT
  echo "node-llama-cpp-build: built in $(cat "$dir/build-seconds") s: $dir" >&2
fi
echo "$dir"
