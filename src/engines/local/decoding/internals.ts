import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import { LlamaInternalsMissingError } from "../../../llamaCpp/bindingFolder.js";

/**
 * The only place that reaches into node-llama-cpp private members. node-llama-cpp 3.21.1 (pinned exactly)
 * applies LoRA adapters only when a context is created; switching them on a live context, and loading
 * one adapter once for all contexts, need these internals. `assertLlamaInternals` is called at start-up
 * and by a test, so an upgrade that removes them fails loudly instead of silently serving base weights.
 */

export interface AdapterWeight {
  /** Absolute path; node-llama-cpp keys its loaded adapters by resolved path. */
  readonly filePath: string;
  readonly scale: number;
}

interface ContextInternals {
  _setLoras(loras: readonly AdapterWeight[]): Promise<void>;
  /** The native context (AddonContext): its `sampleToken` runs on one of libuv's threads. */
  _ctx: { sampleToken(...args: unknown[]): Promise<unknown> };
}

interface ModelInternals {
  _getOrLoadLora(filePath: string): Promise<unknown>;
  _loraAdapters: Map<string, { dispose(): Promise<void> }>;
}

export function assertLlamaInternals(model: LlamaModel, context?: LlamaContext): void {
  if (typeof (model as unknown as Partial<ModelInternals>)._getOrLoadLora !== "function")
    throw new LlamaInternalsMissingError("LlamaModel._getOrLoadLora");
  if (!((model as unknown as Partial<ModelInternals>)._loraAdapters instanceof Map))
    throw new LlamaInternalsMissingError("LlamaModel._loraAdapters");
  if (context && typeof (context as unknown as Partial<ContextInternals>)._setLoras !== "function")
    throw new LlamaInternalsMissingError("LlamaContext._setLoras");
  if (context && typeof (context as unknown as Partial<ContextInternals>)._ctx?.sampleToken !== "function")
    throw new LlamaInternalsMissingError("LlamaContext._ctx.sampleToken");
}

/** Loads an adapter into the model once (resident); later calls with the same path reuse it. */
export async function loadResidentLora(model: LlamaModel, filePath: string): Promise<void> {
  await (model as unknown as ModelInternals)._getOrLoadLora(filePath);
}

/**
 * Frees a resident adapter's memory (node-llama-cpp 3.21.1 frees adapters only when the model is disposed).
 * The caller must have detached it from every context first: llama.cpp would keep a dangling pointer.
 */
export async function freeResidentLora(model: LlamaModel, filePath: string): Promise<void> {
  const cache = (model as unknown as ModelInternals)._loraAdapters;
  const lora = cache.get(filePath);
  if (!lora) return;
  cache.delete(filePath);
  await lora.dispose();
}

/**
 * A sequence of `context` with the lowest id free: node-llama-cpp 3.21.1 hands out freed ids first come, first served
 * (`_unusedSequenceIds`, all below the ids it never gave), so they are sorted first. llama.cpp decodes the tokens of
 * sequences whose ids follow each other in one piece; lanes packed at low ids do so more often.
 */
export function lowestFreeSequence(context: LlamaContext): LlamaContextSequence {
  const free = (context as unknown as { _unusedSequenceIds?: unknown })._unusedSequenceIds;
  if (!Array.isArray(free)) throw new LlamaInternalsMissingError("LlamaContext._unusedSequenceIds");
  (free as number[]).sort((a, b) => a - b);
  return context.getSequence();
}

/** The sequence's id in llama.cpp (node-llama-cpp 3.21.1 keeps it private). */
export function sequenceIdOf(sequence: LlamaContextSequence): number {
  const id = (sequence as unknown as { _sequenceId?: unknown })._sequenceId;
  if (typeof id !== "number") throw new LlamaInternalsMissingError("LlamaContextSequence._sequenceId");
  return id;
}

/** Replaces the context's active adapter set; `[]` returns to the base weights. No file I/O for resident adapters. */
export async function switchContextWeights(context: LlamaContext, weights: readonly AdapterWeight[]): Promise<void> {
  await (context as unknown as ContextInternals)._setLoras(weights);
}

/**
 * What holds a sequence's decodes: `beforeDecode` runs before each, with its start position and tokens, waits until
 * the decode may run and returns what to call once it has run (the lane that owns the sequence: kv/Lane.ts).
 */
export interface DecodeGate {
  beforeDecode(start: number, tokens: readonly Token[]): Promise<() => void>;
}
interface SequenceInternals {
  _decodeTokens(tokens: Token[], ...rest: unknown[]): Promise<unknown>;
}
const decodeGates = new WeakMap<LlamaContextSequence, DecodeGate>();

/**
 * Puts `gate` in front of every decode the sequence makes, whichever public method caused it (prefill, generation,
 * controlled evaluation, node-llama-cpp's own re-evaluation after a cut); replaces the previous gate. Every decode of
 * node-llama-cpp 3.21.1's sequences passes through `_decodeTokens`, which queues the tokens for the context's next
 * batch: a decode the gate holds back is in no batch, and the weights it needs can be applied before it is let go.
 * node-llama-cpp 3.21.1's public batching options cannot do this: `dispatchSchedule` decides only when a context
 * dispatches, and the dispatch then decodes every queued item in one locked loop (a custom `itemPrioritizationStrategy`
 * only orders items, which carry no sequence), so there is no point between two weight sets' tokens to switch the
 * adapters. This is the one hook on a live object, and the one exception to "no patching at run time".
 */
export function gateSequenceDecodes(sequence: LlamaContextSequence, gate: DecodeGate): void {
  const internals = sequence as unknown as SequenceInternals;
  if (typeof internals._decodeTokens !== "function")
    throw new LlamaInternalsMissingError("LlamaContextSequence._decodeTokens");
  if (!decodeGates.has(sequence)) {
    const decode = internals._decodeTokens.bind(sequence);
    internals._decodeTokens = async (tokens, ...rest) => {
      const done = await decodeGates.get(sequence)?.beforeDecode(sequence.nextTokenIndex, tokens);
      try {
        return await decode(tokens, ...rest);
      } finally {
        done?.();
      }
    };
  }
  decodeGates.set(sequence, gate);
}

/**
 * Makes the context sample one token at a time. After a batch of several sequences, llama.cpp's first read of the
 * logits (`llama_get_logits_ith`) applies the batch's pending output reorder: `llama_context::output_reorder` swaps
 * rows and then clears the list, with no lock. node-llama-cpp 3.21.1 samples the tokens of one batch in parallel on
 * libuv's threads, so two samplings can swap the same rows twice and read another sequence's logits (measured: 20 nats
 * on one token's log-prob on Gemma 3 270M while three other sessions decoded, test/engine/load-invariance.test.ts).
 * Sampling one after the other lets the first read reorder alone; the others find the rows in place. A second hook on
 * a live object, beside `gateSequenceDecodes`, for the same reason: no public option reaches it. Called once per
 * context, when it is made (ContextMaker.create).
 */
export function sampleOneAtATime(context: LlamaContext): void {
  const native = (context as unknown as ContextInternals)._ctx;
  const sample = native.sampleToken.bind(native);
  let previous: Promise<unknown> = Promise.resolve();
  // an own property: the addon's methods are read-only on its prototype
  Object.defineProperty(native, "sampleToken", {
    value: (...args: unknown[]) => {
      const result = previous.then(() => sample(...args));
      previous = result.catch(() => undefined);
      return result;
    },
  });
}
