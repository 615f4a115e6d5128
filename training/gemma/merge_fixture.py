"""Writes test/fixtures/merge/peft-merges.safetensors: PEFT's own LoRA merges, for test/unit/merge.test.ts.

The project merges capability adapters without Python (src/library/merge/methods.ts reproduces PEFT's
`add_weighted_adapter` for linear, ties and dare_ties); this script records what PEFT itself makes of three small
adapters, so the unit test checks ours against it without Python in npm test. A tiny random Gemma 3 text model gets
three LoRAs of one rank with different lora_alpha (so their scalings differ), filled with random A and B (a fresh
LoRA's B is zero, which would merge to zero); PEFT merges them with non-trivial weights, negative ones included
(their sign goes on the A side only). dare_ties runs at density 1, where it draws nothing: with a lower density
its random mask comes from torch's generator, which the project does not reproduce.

The file holds every input and output factor, `<adapter>/<module>.lora_A` and `.lora_B` in torch's shape, and in
`__metadata__` (JSON strings) each input's lora_alpha and r and each merge's combination type, weights and density.

Run with the pipeline's virtual environment (training/gemma/requirements.txt):
  ~/.cache/weact-mcp/venv/<hash>/bin/python training/gemma/merge_fixture.py [--out FILE]
"""

import argparse
import json
import os

import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors.torch import save_file
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

RANK = 4
# lora_alpha per adapter: scalings 2, 0.5 and 3
ALPHAS = {"plan": 8, "search": 2, "write": 12}
# three modules keep the file small and still cover both attention shapes (q 64 -> 64, v 64 -> 32) and the MLP's
TARGET_MODULES = ["q_proj", "v_proj", "down_proj"]
MERGES = [
    {"name": "linear", "combination_type": "linear", "weights": [0.5, -0.8, 1.5], "density": None},
    {"name": "ties", "combination_type": "ties", "weights": [1.0, -0.6, 0.4], "density": 0.5},
    {"name": "dare_ties", "combination_type": "dare_ties", "weights": [0.7, 1.1, -0.5], "density": 1.0},
]
SEED = 0


def lora_modules(model):
    """(module path below the base model, LoraLayer) in model order."""
    prefix = "base_model.model."
    return [(name[len(prefix) :], m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "test", "fixtures", "merge", "peft-merges.safetensors")
    parser.add_argument("--out", default=os.path.normpath(default))
    args = parser.parse_args()

    torch.manual_seed(SEED)
    config = Gemma3TextConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
    )
    model = None
    for adapter, alpha in ALPHAS.items():
        lora = LoraConfig(r=RANK, lora_alpha=alpha, target_modules=TARGET_MODULES, lora_dropout=0.0)
        if model is None:
            model = get_peft_model(Gemma3ForCausalLM(config), lora, adapter_name=adapter)
        else:
            model.add_adapter(adapter, lora)

    tensors = {}
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for path, layer in lora_modules(model):
            for adapter in ALPHAS:
                for factor in ("lora_A", "lora_B"):
                    weights = getattr(layer, factor)[adapter].weight
                    weights.copy_(torch.randn(weights.shape, generator=generator) * 0.5)
                    tensors[f"{adapter}/{path}.{factor}"] = weights.detach().clone()

    for merge in MERGES:
        extra = {} if merge["density"] is None else {"density": merge["density"]}
        model.add_weighted_adapter(
            list(ALPHAS), merge["weights"], merge["name"], combination_type=merge["combination_type"], **extra
        )
        for path, layer in lora_modules(model):
            tensors[f"{merge['name']}/{path}.lora_A"] = layer.lora_A[merge["name"]].weight.detach().clone()
            tensors[f"{merge['name']}/{path}.lora_B"] = layer.lora_B[merge["name"]].weight.detach().clone()

    metadata = {
        "format": "pt",
        "adapters": json.dumps([{"name": a, "lora_alpha": alpha, "r": RANK} for a, alpha in ALPHAS.items()]),
        "merges": json.dumps(MERGES),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, args.out, metadata=metadata)
    print(json.dumps({"out": args.out, "tensors": len(tensors), "bytes": os.path.getsize(args.out)}))


if __name__ == "__main__":
    main()
