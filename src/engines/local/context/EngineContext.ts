import type { LlamaContext, LlamaContextSequence } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../engine/index.js";
import { lowestFreeSequence, sequenceIdOf, switchContextWeights, type AdapterWeight } from "../llama/internals.js";
import type { DecodeRounds } from "./DecodeRounds.js";

/** Names a weight set exactly: its versions (content hashes and scales) in order; "base" for none. */
export const weightSetKey = (versions: readonly AdapterVersion[]): string => versions.map(String).join("+") || "base";

/**
 * One llama.cpp context: its sequences belong to sessions' lanes, each decode of one of them under the lane's own
 * weights. llama.cpp applies the adapter set per context and node-llama-cpp decodes the pending evaluations of all
 * sequences together under whatever set is applied, so every decode waits for its round in the engine's
 * `DecodeRounds` (one context and weight set at a time), which applies the set here first.
 */
export class EngineContext {
  private appliedKey: string | undefined;
  /** The adapter versions in the applied set (an adapter is freed only after every context dropped it). */
  private appliedVersions: readonly AdapterVersion[] = [];

  constructor(
    readonly context: LlamaContext,
    readonly id: number,
    /** The weight set (its key) whose lanes this context was created for: the lane pool places them here. */
    readonly home: string,
    private readonly rounds: DecodeRounds,
    private readonly weightOf: (version: AdapterVersion) => AdapterWeight,
  ) {}

  get sequencesLeft(): number {
    return this.context.sequencesLeft;
  }

  /** A free sequence, the lowest-numbered: lanes packed at low ids decode in fewer pieces (see DecodeGroup.sequence). */
  createSequence(): LlamaContextSequence {
    return lowestFreeSequence(this.context);
  }

  /**
   * Waits for a round of `versions` in this context (the set applied, nothing else decoding) for a decode of `tokens`
   * tokens of `sequence`; returns the function that ends the decode's part in it. `background`: evaluation ahead of
   * time (recorded apart).
   */
  decodeRound(
    versions: readonly AdapterVersion[],
    sequence: LlamaContextSequence,
    tokens: number,
    background: boolean,
  ): Promise<() => void> {
    const weights = weightSetKey(versions);
    const apply = () => this.apply(weights, versions);
    // work ahead of time rounds apart: it never shares a caller's batch, so it never changes a caller's numerics
    const group = {
      context: this.id,
      weights: background ? `${weights} ahead` : weights,
      sequence: sequenceIdOf(sequence),
      apply,
    };
    return this.rounds.enter(group, tokens, background);
  }

  /** The hop where a session's weights reach llama.cpp; only between rounds. True when the set changed. */
  private async apply(key: string, versions: readonly AdapterVersion[]): Promise<boolean> {
    if (this.appliedKey === key) return false;
    this.appliedKey = undefined; // a failed switch leaves the set unknown: the next round applies its own again
    await switchContextWeights(
      this.context,
      versions.map((v) => this.weightOf(v)),
    );
    this.appliedKey = key;
    this.appliedVersions = versions;
    return true;
  }

  /**
   * Drops `version` from the applied set (the next round applies its own). Call only inside `DecodeRounds.exclusive`:
   * llama.cpp must not be decoding with it.
   */
  async detach(version: AdapterVersion): Promise<void> {
    if (!this.appliedVersions.some((v) => v.equals(version))) return;
    await switchContextWeights(this.context, []);
    this.appliedKey = undefined;
    this.appliedVersions = [];
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
  }
}
