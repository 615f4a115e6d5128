import type { MergeMethod } from "./settings.js";

/**
 * PEFT 0.21's `add_weighted_adapter` for LoRA (`_generalized_task_arithmetic_weighted_adapter` and
 * `peft/utils/merge_utils.py`), combination types linear, ties and dare_ties, majority sign by "total". PEFT merges
 * the lora_A factors among themselves and the lora_B factors among themselves (not the products B·A), and the merged
 * adapter has the adapters' rank with lora_alpha = r (scaling 1): each adapter's weight times its scaling is split
 * between its factors, sqrt(|w·s|) with the sign of w·s on A, sqrt(|w·s|) on B. Arithmetic is float32 step by step,
 * as torch computes it on float32 tensors, so the results equal PEFT's (test/unit/merge.test.ts checks them against
 * PEFT's own output); DARE's random mask comes from our generator, not torch's, so only its statistics match.
 */

/** One adapter's factors for one target, each flattened in torch's row-major order. */
export interface LoraFactors {
  /** lora_A, torch [r, in]: GGUF's lora_a, ggml ne [in, r], is the same bytes. */
  readonly a: Float32Array;
  /** lora_B, torch [out, r]: GGUF's lora_b, ggml ne [r, out]. */
  readonly b: Float32Array;
  /** PEFT's `scaling`: alpha / r, times the scale the adapter is served at. */
  readonly scaling: number;
}

export interface MergeOptions {
  method: MergeMethod;
  /** One per adapter. */
  weights: readonly number[];
  /** The fraction kept of each factor (ties, dare-ties); 1 or more keeps all. */
  density: number;
  /** Uniform draws in [0, 1) for DARE's keep-or-drop, one per element, A's factors first, then B's. */
  random: () => number;
}

const f32 = Math.fround;

/** The merged factors of one target: lora_A and lora_B of the merged adapter (rank r, scaling 1). */
export function mergeLora(adapters: readonly LoraFactors[], opts: MergeOptions): { a: Float32Array; b: Float32Array } {
  // PEFT merges a single adapter linearly, whatever the combination type asked
  const method = adapters.length === 1 ? "linear" : opts.method;
  const signed: number[] = [];
  const unsigned: number[] = [];
  adapters.forEach((adapter, k) => {
    const withScaling = opts.weights[k]! * adapter.scaling;
    // the sign goes on A only: on both sides it would cancel out
    const root = Math.sqrt(Math.abs(withScaling));
    signed.push(f32(withScaling >= 0 ? root : -root));
    unsigned.push(f32(root));
  });
  const factor = (tensors: Float32Array[], weights: readonly number[]) =>
    mergeFactor(
      tensors.map((t) => prune(t, method, opts)),
      weights,
      method,
    );
  return {
    a: factor(
      adapters.map((x) => x.a),
      signed,
    ),
    b: factor(
      adapters.map((x) => x.b),
      unsigned,
    ),
  };
}

/** merge_utils' `prune`: linear keeps everything; ties keeps the largest magnitudes, dare-ties a random sample. */
function prune(tensor: Float32Array, method: MergeMethod, opts: MergeOptions): Float32Array {
  if (method === "linear" || opts.density >= 1) return tensor;
  return method === "ties"
    ? keepLargest(tensor, Math.trunc(opts.density * tensor.length))
    : keepRandom(tensor, opts.density, opts.random);
}

/**
 * `magnitude_based_pruning`: the k entries of largest magnitude stay, the others become zero. Equal magnitudes at
 * the cut are kept in element order (torch.topk's choice among them is unspecified; random floats seldom tie).
 */
function keepLargest(tensor: Float32Array, k: number): Float32Array {
  const out = new Float32Array(tensor.length);
  if (k === 0) return out;
  const cut = Float32Array.from(tensor, Math.abs).sort()[tensor.length - k]!;
  let atCut = k;
  for (const x of tensor) if (Math.abs(x) > cut) atCut--;
  tensor.forEach((x, i) => {
    const m = Math.abs(x);
    if (m > cut || (m === cut && atCut-- > 0)) out[i] = x;
  });
  return out;
}

/** `random_pruning` with rescale: each entry stays with probability `density`, divided by it (DARE). */
function keepRandom(tensor: Float32Array, density: number, random: () => number): Float32Array {
  return tensor.map((x) => (random() < density ? x / density : 0));
}

/**
 * `task_arithmetic` (linear) or, for ties and dare-ties, `calculate_majority_sign_mask` ("total": the sign of the
 * pruned, unweighted entries' sum, zero counting as positive) and `disjoint_merge`: the mean of the weighted entries
 * whose own sign is the majority's.
 */
function mergeFactor(pruned: readonly Float32Array[], weights: readonly number[], method: MergeMethod): Float32Array {
  const out = new Float32Array(pruned[0]!.length);
  for (let i = 0; i < out.length; i++) {
    if (method === "linear") {
      let sum = 0;
      pruned.forEach((t, k) => (sum = f32(sum + f32(t[i]! * weights[k]!))));
      out[i] = sum;
      continue;
    }
    let total = 0;
    for (const t of pruned) total = f32(total + t[i]!);
    const majority = total >= 0 ? 1 : -1;
    let sum = 0;
    let agreeing = 0;
    pruned.forEach((t, k) => {
      if (Math.sign(t[i]!) !== majority) return;
      sum = f32(sum + f32(t[i]! * weights[k]!));
      agreeing++;
    });
    out[i] = sum / Math.max(agreeing, 1);
  }
  return out;
}
