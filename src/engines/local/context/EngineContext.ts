import type { LlamaContext, LlamaContextSequence } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../engine/index.js";
import { switchContextWeights, type AdapterWeight } from "../llama/internals.js";
import { TimedLock, type WorkLog } from "./WorkLog.js";

/**
 * One llama.cpp context shared by several sessions, one sequence each. llama.cpp applies the adapter set
 * per context, and node-llama-cpp decodes the pending evaluations of all sequences together under
 * whatever set is active, so every evaluation runs under `lock` after `switchWeights` for its session.
 */
export class EngineContext {
  readonly lock: TimedLock;
  private appliedKey: string | undefined;
  /** The adapter versions in the applied set (an adapter is freed only after every context dropped it). */
  private appliedVersions: readonly AdapterVersion[] = [];

  constructor(
    readonly context: LlamaContext,
    log: WorkLog,
    id: number,
  ) {
    this.lock = new TimedLock(log, id);
  }

  get sequencesLeft(): number {
    return this.context.sequencesLeft;
  }

  createSequence(): LlamaContextSequence {
    return this.context.getSequence();
  }

  /**
   * The hop where a session's weights reach llama.cpp: applies the adapter set of `versions` (each with its
   * file and scale in `weights`) unless it is the active one. Call only while holding `lock`.
   */
  async switchWeights(versions: readonly AdapterVersion[], weights: readonly AdapterWeight[]): Promise<void> {
    const key = versions.map(String).join("+") || "base";
    if (this.appliedKey === key) return;
    await switchContextWeights(this.context, weights);
    this.appliedKey = key;
    this.appliedVersions = versions;
  }

  /**
   * Drops `version` from the applied set (the base weights apply until the next evaluation sets its own).
   * Call only while holding `lock`.
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
