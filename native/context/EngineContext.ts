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
  private adapterSetChanges = 0;

  constructor(readonly context: LlamaContext) {}

  get sequencesLeft(): number {
    return this.context.sequencesLeft;
  }

  get adapterSetChangeCount(): number {
    return this.adapterSetChanges;
  }

  createSequence(): LlamaContextSequence {
    return this.context.getSequence();
  }

  /** Applies the adapter set named by `key` if another one is active. Call only while holding `lock`. */
  async applyWeights(key: string, weights: readonly AdapterWeight[]): Promise<void> {
    if (this.appliedKey === key) return;
    await setContextAdapters(this.context, weights);
    this.appliedKey = key;
    this.adapterSetChanges++;
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
  }
}
