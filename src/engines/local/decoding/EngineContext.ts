import type { LlamaContext, LlamaContextSequence, LlamaModel } from "node-llama-cpp";
import type { AdapterVersion, WeightSet } from "../../../engine/index.js";
import {
  assertLlamaInternals,
  lowestFreeSequence,
  sampleOneAtATime,
  sequenceIdOf,
  switchContextWeights,
  type AdapterWeight,
} from "./internals.js";
import type { DecodeRounds, RoundTarget } from "./DecodeRounds.js";

/** Where an adapter version's file is for llama.cpp (the engine's resident adapters). */
export interface AdapterFiles {
  weight(version: AdapterVersion): AdapterWeight;
}

/**
 * One llama.cpp context: its sequences belong to sessions' lanes, each decode of one of them under the lane's own
 * weights. llama.cpp applies the adapter set per context and node-llama-cpp decodes the pending evaluations of all
 * sequences together under whatever set is applied, so every decode waits for its round in the engine's
 * `DecodeRounds` (one context and weight set at a time), which applies the set here first.
 */
export class EngineContext implements RoundTarget {
  /** The set applied now; undefined when unknown (none yet, or a switch failed). */
  private applied: WeightSet | undefined;
  /** The adapter versions llama.cpp was last given (an adapter is freed only after every context dropped it). */
  private holding: readonly AdapterVersion[] = [];

  constructor(
    readonly context: LlamaContext,
    readonly id: number,
    /** The weight set whose lanes this context was created for: the lane pool places them here. */
    readonly home: WeightSet,
    private readonly rounds: DecodeRounds,
    private readonly adapters: AdapterFiles,
  ) {}

  get sequencesLeft(): number {
    return this.context.sequencesLeft;
  }

  /** A free sequence, the lowest-numbered: lanes packed at low ids decode in fewer pieces (see DecodeGroup.sequence). */
  createSequence(): LlamaContextSequence {
    return lowestFreeSequence(this.context);
  }

  /**
   * Waits for a round of `weights` in this context (the set applied, nothing else decoding) for a decode of `tokens`
   * tokens of `sequence`; returns the function that ends the decode's part in it. `background`: evaluation ahead of
   * time, which rounds apart from callers'.
   */
  decodeRound(
    weights: WeightSet,
    sequence: LlamaContextSequence,
    tokens: number,
    background: boolean,
  ): Promise<() => void> {
    return this.rounds.enter({ context: this, weights, background, sequence: sequenceIdOf(sequence) }, tokens);
  }

  /** The hop where a session's weights reach llama.cpp; only between rounds. True when the set changed. */
  async apply(weights: WeightSet): Promise<boolean> {
    if (this.applied?.appliesAs(weights)) return false;
    this.applied = undefined; // a failed switch leaves the set unknown: the next round applies its own again
    await switchContextWeights(
      this.context,
      weights.versions.map((v) => this.adapters.weight(v)),
    );
    this.applied = weights;
    this.holding = weights.versions;
    return true;
  }

  /**
   * Drops `version` from the applied set (the next round applies its own). Call only inside `DecodeRounds.exclusive`:
   * llama.cpp must not be decoding with it.
   */
  async detach(version: AdapterVersion): Promise<void> {
    if (!this.holding.some((v) => v.equals(version))) return;
    await switchContextWeights(this.context, []);
    this.applied = undefined;
    this.holding = [];
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
  }
}

/** What every context of the engine shares, so sessions' and reference contexts evaluate with the same numerics. */
export interface ContextSizes {
  contextSize: number;
  batchSize: number;
  threads: number;
  swaFullCache: boolean;
  /**
   * Off when the engine is batch-invariant: llama.cpp's CPU flash attention sums a query's keys in tiles that depend
   * on how many of its sequence's tokens a batch holds (up to 0.97 nats on Gemma 3 between two splits of one prompt),
   * where the plain attention gives every split the same numbers.
   */
  flashAttention: boolean | "auto";
}

/** Makes the engine's contexts: the sessions' (in the engine's decode rounds) and plain ones for the reference. */
export class ContextMaker {
  constructor(
    private readonly model: LlamaModel,
    private readonly sizes: ContextSizes,
    private readonly sequencesPerContext: number,
    private readonly rounds: DecodeRounds,
    private readonly adapters: AdapterFiles,
  ) {}

  /** A context for sessions' lanes, home to `home`'s lanes. */
  async create(id: number, home: WeightSet): Promise<EngineContext> {
    const context = await this.model.createContext({ ...this.sizes, sequences: this.sequencesPerContext });
    assertLlamaInternals(this.model, context);
    sampleOneAtATime(context);
    return new EngineContext(context, id, home, this.rounds, this.adapters);
  }

  /** A context of one sequence outside the rounds, with the sessions' numerics (the test oracle's). */
  createPlain(): Promise<LlamaContext> {
    return this.model.createContext({ ...this.sizes, sequences: 1 });
  }
}
