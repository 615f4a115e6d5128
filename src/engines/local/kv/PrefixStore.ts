import { createHash } from "node:crypto";
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { EngineLogger } from "../../../engine/index.js";
import type { Decode } from "./DecodeLog.js";
import type { PrefixKeyOf } from "../deciding/SessionRules.js";
import type { SpilledState, SpillStore } from "./SpillStore.js";

/** The prompt prefix an empty cache may start from: its tokens, and who may share its KV. */
export interface PromptPrefix {
  readonly tokens: readonly Token[];
  /** Sessions of one scope share a prefix's KV (and so could tell, by timing, that another computed it). */
  readonly scope: string;
}

/** The engine's prefix key: the scope, the weight set's key and the tokens' hash. */
export const prefixKeyOf: PrefixKeyOf = (scope, weights, tokens) =>
  `${scope}\u0000${weights}\u0000${createHash("sha256").update(Uint32Array.from(tokens)).digest("hex")}`;

export interface PrefixStats {
  enabled: boolean;
  entries: number;
  bytes: number;
  hits: number;
  saved: number;
}

/**
 * Saved KV states of prompt prefixes (the rendered system prompt and function docs, the same for every session
 * of a library and toolset), one per weight set and sharing scope: a new cache restores its prefix instead of
 * evaluating it. node-llama-cpp 3.21.1 has no KV sequence copy, so a state file is the copy; the files live in
 * the spill store, under its budget (a prefix restored often stays, its use moves it to the back of the queue).
 */
export class PrefixStore {
  private readonly entries = new Map<string, SpilledState>();
  private hits = 0;
  private saved = 0;

  constructor(
    private readonly spill: SpillStore,
    private readonly logger: EngineLogger,
  ) {}

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /**
   * Loads the prefix saved under `key` into an empty sequence; its decodes when it did (the cache now holds
   * them), undefined when there is none (or its file was pushed out meanwhile: the sequence is left empty).
   * Caller holds the sequence's lock.
   */
  async restore(key: string, sequence: LlamaContextSequence): Promise<readonly Decode[] | undefined> {
    const state = this.entries.get(key);
    if (!state) return undefined;
    try {
      if (!(await this.spill.copyInto(state, sequence))) return void this.entries.delete(key);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, "restoring a shared prompt prefix failed; evaluating it");
      await sequence.clearHistory();
      return undefined;
    }
    this.hits++;
    return state.decodes;
  }

  /**
   * Saves the sequence (holding exactly the prefix, computed by `decodes`) under `key`. Caller holds the sequence's lock.
   */
  async save(key: string, sequence: LlamaContextSequence, decodes: readonly Decode[]): Promise<void> {
    if (this.entries.has(key)) return;
    const state = await this.spill
      .save(
        sequence,
        decodes,
        (dropped) => {
          if (this.entries.get(key) === dropped) this.entries.delete(key);
        },
        true,
      )
      .catch((err) => {
        this.logger.warn({ err: (err as Error).message }, "saving a shared prompt prefix failed");
        return undefined;
      });
    if (!state) return;
    if (this.entries.has(key)) return this.spill.remove(state); // another context saved it meanwhile
    this.entries.set(key, state);
    this.saved++;
  }

  stats(): PrefixStats {
    let bytes = 0;
    for (const s of this.entries.values()) bytes += s.bytes;
    return { enabled: true, entries: this.entries.size, bytes, hits: this.hits, saved: this.saved };
  }
}
