import type { LlamaContext, LlamaContextSequence } from "node-llama-cpp";
import { setContextAdapters, type AdapterWeight } from "../llama/internals.js";
import { Mutex } from "./Mutex.js";

/**
 * One llama.cpp context shared by several sessions, one sequence each. llama.cpp applies the adapter set
 * per context, and node-llama-cpp decodes the pending evaluations of all sequences together under
 * whatever set is active, so every evaluation runs under `lock` after `applyWeights` for its session.
 */
export class EngineContext {
  readonly lock = new Mutex();
  private appliedKey: string | undefined;
  /** The adapter versions in the applied set (an adapter is freed only after every context dropped it). */
  private appliedVersions: readonly string[] = [];

  constructor(readonly context: LlamaContext) {}

  get sequencesLeft(): number {
    return this.context.sequencesLeft;
  }

  createSequence(): LlamaContextSequence {
    return this.context.getSequence();
  }

  /** Applies the adapter set named by `key` if another one is active. Call only while holding `lock`. */
  async applyWeights(key: string, versions: readonly string[], weights: readonly AdapterWeight[]): Promise<void> {
    if (this.appliedKey === key) return;
    await setContextAdapters(this.context, weights);
    this.appliedKey = key;
    this.appliedVersions = versions;
  }

  /**
   * Drops `version` from the applied set (the base weights apply until the next evaluation sets its own).
   * Call only while holding `lock`.
   */
  async detach(version: string): Promise<void> {
    if (!this.appliedVersions.includes(version)) return;
    await setContextAdapters(this.context, []);
    this.appliedKey = undefined;
    this.appliedVersions = [];
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
  }
}
