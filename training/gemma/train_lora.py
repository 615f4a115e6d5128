"""Trains one LoRA per capability over a frozen GGUF base (npm run train:gemma's and train:qwen-chooser's train step).

Reads the data step's windows (weact-train's WTS1 files: the token ids of a stage sample as the server renders it,
and a mask of the stage's own target tokens), and for each capability trains a fresh LoRA on the dequantized GGUF
with the loss on those targets only: the base stays frozen, and each adapter learns its own stage and exit actions
with everything before them as context (the paper's recipe). Writes one PEFT folder per capability, the base's
config.json (what llama.cpp's convert_lora_to_gguf.py needs), and prints one JSON line per capability: the
training losses, the held-out loss and token accuracy with and without the adapter, the tokens and the seconds.
With --invocations, the capabilities named there are activated LoRAs (PEFT's aLoRA): each applies from the last
occurrence of its invocation sequence on, so everything before it is the frozen base's, as the server serves it.
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


def target_loss(model, tokens, mask, turns=False):
    """Mean cross-entropy and correct count on the masked tokens, each predicted from the tokens before it; with
    `turns`, also how many runs of consecutive targets (a turn the model writes) are right in every token.

    Through the PEFT model's own forward (it finds an aLoRA's invocation point there), with the vocabulary head
    (262k rows) run only at the positions that predict a target: on a whole window it would cost more than the rest
    of the model."""
    ids = torch.from_numpy(tokens).unsqueeze(0)
    positions = torch.from_numpy(np.nonzero(mask[1:])[0])
    logits = model(input_ids=ids, logits_to_keep=positions).logits[0]
    targets = ids[0, positions + 1]
    loss = torch.nn.functional.cross_entropy(logits, targets)
    right = logits.argmax(-1) == targets
    if not turns:
        return loss, int(right.sum()), len(positions)
    # a new turn starts where a target does not follow another target
    starts = np.nonzero(np.diff(np.concatenate([[-2], positions.numpy()])) != 1)[0]
    ends = np.concatenate([starts[1:], [len(positions)]])
    exact = sum(bool(right[a:b].all()) for a, b in zip(starts, ends))
    return loss, int(right.sum()), len(positions), len(starts), exact


def score(model, samples):
    """Held-out loss and token accuracy, and the turns right in every token (greedy decoding would write them)."""
    total, correct, count, turns, exact = 0.0, 0, 0, 0, 0
    with torch.no_grad():
        for tokens, mask in samples:
            loss, right, n, t, e = target_loss(model, tokens, mask, turns=True)
            total += float(loss) * n
            correct += right
            count += n
            turns += t
            exact += e
    return {
        "samples": len(samples),
        "targets": count,
        "loss": total / max(1, count),
        "accuracy": correct / max(1, count),
        "turns": turns,
        "turnsExact": exact / max(1, turns),
    }


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


def save_checkpoint(model, optimizer, schedule, state, folder):
    """Everything a resumed run needs, written whole before it replaces the last checkpoint."""
    os.makedirs(folder, exist_ok=True)
    adapter = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    torch.save(
        {"adapter": adapter, "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(), **state},
        os.path.join(folder, "checkpoint.pt.tmp"),
    )
    os.replace(os.path.join(folder, "checkpoint.pt.tmp"), os.path.join(folder, "checkpoint.pt"))


def last_occurrence(tokens, sequence):
    """The start of the last occurrence of `sequence` in `tokens` (as PEFT's calculate_alora_offsets finds it), or -1."""
    n = len(sequence)
    for i in range(len(tokens) - n, -1, -1):
        if np.array_equal(tokens[i : i + n], sequence):
            return i
    return -1


def check_invocation(capability, invocation, samples):
    """An aLoRA learns nothing from a sample whose targets do not follow its invocation: every sample must hold it,
    its last occurrence before the first target (the load exchange's activation text, before the stage's turns)."""
    sequence = np.array(invocation, dtype=np.int64)
    for k, (tokens, mask) in enumerate(samples):
        at = last_occurrence(tokens, sequence)
        first = int(np.argmax(mask))
        if at < 0 or at + len(sequence) > first:
            raise SystemExit(
                f"{capability}: sample {k} has its invocation sequence {'at ' + str(at) if at >= 0 else 'nowhere'}, "
                f"not before its first target at {first}: the samples were not rendered with the load exchange"
            )


def train_capability(base, capability, args):
    samples = read_samples(os.path.join(args.work, f"{capability}.bin"))
    held = read_samples(os.path.join(args.work, f"{capability}.held.bin"))
    torch.manual_seed(args.seed)
    invocation = args.invocations.get(capability) if args.invocations else None
    if invocation:
        check_invocation(capability, invocation, samples + held)
    config = LoraConfig(
        r=args.rank,
        lora_alpha=args.alpha,
        lora_dropout=0.0,
        target_modules=TARGET_MODULES,
        task_type="CAUSAL_LM",
        alora_invocation_tokens=invocation,
    )
    # a fresh copy of the frozen base per capability: no adapter sees another's weights
    model = get_peft_model(copy.deepcopy(base), config, adapter_name="default")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    steps = args.epochs * len(samples) // args.batch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / args.warmup) * max(0.0, 1 - s / max(1, steps))
    )
    state = {"epoch": 0, "next": 0, "step": 0, "tokens": 0, "seconds": 0.0, "losses": []}
    folder = os.path.join(args.checkpoints, capability) if args.checkpoints else None
    if folder and os.path.exists(os.path.join(folder, "checkpoint.pt")):
        saved = torch.load(os.path.join(folder, "checkpoint.pt"), weights_only=False)
        loaded = model.load_state_dict(saved.pop("adapter"), strict=False)
        # the base's own weights are not in a checkpoint; every LoRA weight must be, and nothing else
        lost = [k for k in loaded.missing_keys if "lora_" in k]
        if loaded.unexpected_keys or lost:
            raise SystemExit(f"{folder}: the checkpoint does not fit this LoRA: {(loaded.unexpected_keys + lost)[:3]}")
        optimizer.load_state_dict(saved.pop("optimizer"))
        schedule.load_state_dict(saved.pop("schedule"))
        state = saved
        print(json.dumps({"capability": capability, "resumed": {k: state[k] for k in ("epoch", "next", "step")}}), flush=True)
    # the same order on every run: each epoch's permutation drawn in turn from the seed
    order = np.random.default_rng(args.seed)
    permutations = [order.permutation(len(samples)) for _ in range(args.epochs)]
    started, window = time.time() - state["seconds"], []
    deadline = time.time() + args.max_minutes * 60 if args.max_minutes > 0 else None
    model.train()
    paused = False
    while state["epoch"] < args.epochs and not paused:
        permutation = permutations[state["epoch"]]
        while state["next"] < len(samples):
            tokens, mask = samples[permutation[state["next"]]]
            loss, _, _ = target_loss(model, tokens, mask)
            (loss / args.batch).backward()
            window.append(loss.item())
            state["tokens"] += len(tokens)
            state["next"] += 1
            if state["next"] % args.batch == 0:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                state["step"] += 1
                state["seconds"] = time.time() - started
                if state["step"] % args.log_every == 0:
                    state["losses"].append({"step": state["step"], "loss": round(sum(window) / len(window), 4)})
                    window = []
                    line = {"capability": capability, "epoch": state["epoch"], **state["losses"][-1]}
                    print(json.dumps({**line, "of": steps, "seconds": round(state["seconds"])}), flush=True)
                # a checkpoint at every step boundary the run may stop on (only whole batches are saved)
                if folder and (state["step"] % args.checkpoint_every == 0 or (deadline and time.time() > deadline)):
                    save_checkpoint(model, optimizer, schedule, state, folder)
                if deadline and time.time() > deadline:
                    paused = True
                    break
        if not paused:
            state["epoch"] += 1
            state["next"] = 0
    if paused:
        print(json.dumps({"paused": {"capability": capability, "step": state["step"], "of": steps}}), flush=True)
        return None
    seconds = state["seconds"]
    model.eval()
    adapted = score(model, held)
    save_f16(model, os.path.join(args.out, capability))
    with model.disable_adapter():
        unadapted = score(model, held)
    return {
        "capability": capability,
        "samples": len(samples),
        "tokens": state["tokens"],
        "steps": state["step"],
        "seconds": round(seconds),
        "tokensPerSecond": round(state["tokens"] / max(1e-9, seconds)),
        "losses": state["losses"],
        "heldOut": adapted,
        "heldOutBase": unadapted,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the frozen base's GGUF (weact-mcp fetch-model gemma-3-270m, or qwen2.5-coder-0.5b-instruct)")
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
    parser.add_argument("--checkpoints", help="where each capability's last checkpoint is kept, and resumed from")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints")
    parser.add_argument(
        "--invocations",
        type=lambda path: json.load(open(path)),
        help="a JSON file {capability: [token ids]}: each capability named there is trained as an activated LoRA "
        "(PEFT's alora_invocation_tokens), applied from the last occurrence of its sequence on",
    )
    parser.add_argument("--max-minutes", type=float, default=0, help="stop at a checkpoint after M minutes (0: never)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    base = load_base(args.model)
    os.makedirs(args.out, exist_ok=True)
    save_base_config(base, os.path.join(args.out, "base"))
    for capability in args.capabilities.split(","):
        result = train_capability(base, capability, args)
        if result is None:
            return
        print(json.dumps({"result": result}), flush=True)


if __name__ == "__main__":
    main()
