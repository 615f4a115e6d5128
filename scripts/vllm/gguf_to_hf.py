"""Writes a GGUF base model in the Hugging Face form vLLM's CPU build loads (config.json, model.safetensors,
tokenizer.json), once: transformers reads the GGUF, dequantizes its weights to F32 and converts its tokenizer.
vLLM 0.32's CPU build does not serve the GGUF itself (scripts/vllm-serve.sh says why); F32 keeps the dequantized
weights exact, so vLLM computes with the very values llama.cpp dequantizes on the fly.

    python gguf_to_hf.py MODEL.gguf OUT_DIR

OUT_DIR is written beside its final place and renamed, so an interrupted conversion is never taken for a whole one.
"""

import os
import shutil
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(gguf: str, out: str) -> None:
    folder, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    building = f"{out}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # the weights are plain F32 tensors now: without these, transformers refuses to save a "GGUF-quantized" model,
    # and vLLM would look for GGUF kernels
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(building)
    tokenizer.save_pretrained(building)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(building, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_to_hf.py MODEL.gguf OUT_DIR")
    main(sys.argv[1], sys.argv[2])
