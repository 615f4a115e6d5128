"""Trains one LoRA per capability over the frozen Gemma 3 270M (npm run train:gemma's train step).

Reads the data step's windows (weact-train's WTS1 files: the token ids of a stage sample as the server renders it,
and a mask of the stage's own target tokens), and for each capability trains a fresh LoRA on the dequantized GGUF
with the loss on those targets only: the base stays frozen, and each adapter learns its own stage and exit actions
with everything before them as context (the paper's recipe). Writes one PEFT folder per capability, the base's
config.json (what llama.cpp's convert_lora_to_gguf.py needs), and prints one JSON line per capability: the
training losses, the held-out loss and token accuracy with and without the adapter, the tokens and the seconds.
"""

import argparse
import copy
import json
import os
import struct
import time

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def read_samples(path):
    """A WTS1 file (training/pipeline/samples.ts writeSamples): [(tokens, mask)]."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"WTS1":
        raise SystemExit(f"{path}: not a WTS1 samples file")
    (count,) = struct.unpack_from("<I", data, 4)
    at, samples = 8, []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, at)
        at += 4
        tokens = np.frombuffer(data, dtype="<u4", count=n, offset=at).astype(np.int64)
        at += 4 * n
        mask = np.frombuffer(data, dtype=np.uint8, count=n, offset=at).astype(bool)
        at += n
        samples.append((tokens, mask))
    return samples


def load_base(gguf):
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gguf), gguf_file=os.path.basename(gguf), dtype=torch.float32, attn_implementation="sdpa"
    )
    model.requires_grad_(False)
    return model


def target_loss(model, tokens, mask):
    """Mean cross-entropy and correct count on the masked tokens, each predicted from the tokens before it.

    The vocabulary head (262k rows) runs only at the positions that predict a target: on a whole window it would
    cost more than the rest of the model."""
    ids = torch.from_numpy(tokens).unsqueeze(0)
    positions = torch.from_numpy(np.nonzero(mask[1:])[0])
    hidden = model.get_base_model().model(input_ids=ids).last_hidden_state[0, positions]
    logits = model.get_base_model().lm_head(hidden)
    targets = ids[0, positions + 1]
    loss = torch.nn.functional.cross_entropy(logits, targets)
    return loss, int((logits.argmax(-1) == targets).sum()), len(positions)


def score(model, samples):
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for tokens, mask in samples:
            loss, right, n = target_loss(model, tokens, mask)
            total += float(loss) * n
            correct += right
            count += n
    return {"samples": len(samples), "targets": count, "loss": total / max(1, count), "accuracy": correct / max(1, count)}


def save_base_config(base, folder):
    """The base's config.json as convert_lora_to_gguf.py reads it: it picks its converter by `architectures`, which a
    config loaded from a GGUF lacks, and would try to dequantize by `quantization_config` (how transformers read the
    GGUF, not part of the model)."""
    config = base.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = [type(base).__name__]
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def save_f16(model, folder):
    """The PEFT folder with its tensors in F16: the size shipped (trained in F32, served as llama.cpp's F16 LoRAs)."""
    model.save_pretrained(folder)
    weights = os.path.join(folder, "adapter_model.safetensors")
    tensors = {name: t.to(torch.float16).contiguous() for name, t in load_file(weights).items()}
    save_file(tensors, weights, metadata={"format": "pt"})


def train_capability(base, capability, args):
    samples = read_samples(os.path.join(args.work, f"{capability}.bin"))
    held = read_samples(os.path.join(args.work, f"{capability}.held.bin"))
    torch.manual_seed(args.seed)
    config = LoraConfig(
        r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, target_modules=TARGET_MODULES, task_type="CAUSAL_LM"
    )
    # a fresh copy of the frozen base per capability: no adapter sees another's weights
    model = get_peft_model(copy.deepcopy(base), config, adapter_name="default")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    steps = args.epochs * len(samples) // args.batch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / args.warmup) * max(0.0, 1 - s / max(1, steps))
    )
    order = np.random.default_rng(args.seed)
    started, losses, tokens_seen, step, window = time.time(), [], 0, 0, []
    model.train()
    for epoch in range(args.epochs):
        for i, k in enumerate(order.permutation(len(samples))):
            tokens, mask = samples[k]
            loss, _, _ = target_loss(model, tokens, mask)
            (loss / args.batch).backward()
            window.append(loss.item())
            tokens_seen += len(tokens)
            if (i + 1) % args.batch == 0:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                step += 1
                if step % args.log_every == 0:
                    losses.append({"step": step, "loss": round(sum(window) / len(window), 4)})
                    print(
                        json.dumps({"capability": capability, "epoch": epoch, **losses[-1], "seconds": round(time.time() - started)}),
                        flush=True,
                    )
                    window = []
    seconds = time.time() - started
    model.eval()
    adapted = score(model, held)
    save_f16(model, os.path.join(args.out, capability))
    with model.disable_adapter():
        unadapted = score(model, held)
    return {
        "capability": capability,
        "samples": len(samples),
        "tokens": tokens_seen,
        "steps": step,
        "seconds": round(seconds),
        "tokensPerSecond": round(tokens_seen / seconds),
        "losses": losses,
        "heldOut": adapted,
        "heldOutBase": unadapted,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the Gemma 3 270M GGUF (weact-mcp fetch-model gemma-3-270m)")
    parser.add_argument("--work", required=True, help="the data step's folder: CAPABILITY.bin and CAPABILITY.held.bin")
    parser.add_argument("--out", required=True, help="where the PEFT folders and the base's config.json go")
    parser.add_argument("--capabilities", default="plan,search,write")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    base = load_base(args.model)
    os.makedirs(args.out, exist_ok=True)
    save_base_config(base, os.path.join(args.out, "base"))
    for capability in args.capabilities.split(","):
        print(json.dumps({"result": train_capability(base, capability, args)}), flush=True)


if __name__ == "__main__":
    main()
