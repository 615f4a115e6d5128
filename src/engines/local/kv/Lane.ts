import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { WeightSet } from "../../../engine/index.js";
import type { EngineContext } from "../decoding/EngineContext.js";
import { gateSequenceDecodes, type DecodeGate } from "../decoding/internals.js";
import { DecodeLog, type CacheReplay } from "./DecodeLog.js";
import type { SlotLock } from "./SlotLock.js";
import type { SpilledState } from "./SpillStore.js";

/** A sequence of a shared context, with the lock its lane operations take. */
export interface Slot {
  readonly context: EngineContext;
  readonly sequence: LlamaContextSequence;
  readonly lock: SlotLock;
}

/**
 * One session's KV cache under one weight set (the base, an adapter version, or several applied together).
 * Its cache is in a live sequence, or spilled to a file, or gone. `weights` names them exactly (adapter versions are
 * content hashes and scales), so a lane is only ever continued under the weights that computed it. It holds its
 * sequence's decodes (`beforeDecode`) until a round of its decode weights.
 */
export class Lane implements DecodeGate {
  private live: Slot | undefined;
  spilled: SpilledState | undefined;
  private readonly log = new DecodeLog();
  /**
   * An activated LoRA's lane (the session's base lane while the adapter is active): its cache holds the base's
   * KV before this position and the adapter's from it; Infinity while it is all the base's (the invocation
   * sequence was absent). undefined for every other lane: its whole cache is under `versions`.
   */
  activatedFrom: number | undefined;
  /**
   * Started ahead of time on a guess of the session's next weights and never used since: the first lane the
   * pool takes a sequence from, and dropped rather than spilled, so a guess never costs another session a spill
   * in its foreground nor pushes out their spilled caches.
   */
  speculative = false;
  /**
   * The weights the lane's next decodes run under: its own, or the base before an activated LoRA's invocation point
   * (laneSync sets them before it evaluates); each decode waits for their round in its context.
   */
  decodeWeights: WeightSet;

  constructor(
    readonly owner: number,
    public weights: WeightSet,
  ) {
    this.decodeWeights = weights;
  }

  get slot(): Slot | undefined {
    return this.live;
  }

  /** Neither live nor spilled: nothing left to reuse. */
  get empty(): boolean {
    return !this.live && !this.spilled;
  }

  /**
   * Gives the lane a sequence; from now on every decode on it is logged and runs in a round of the lane's decode
   * weights.
   */
  attach(slot: Slot): void {
    this.live = slot;
    this.log.clear();
    gateSequenceDecodes(slot.sequence, this);
  }

  /** Every decode on the lane's sequence: logged, then run in a round of the lane's decode weights. */
  beforeDecode(start: number, tokens: readonly Token[]): Promise<() => void> {
    const slot = this.live!;
    this.log.record(start, tokens);
    return slot.context.decodeRound(this.decodeWeights, slot.sequence, tokens.length, slot.lock.inBackground);
  }

  /** Takes the sequence away (to dispose or hand to another lane). */
  detach(): Slot | undefined {
    const slot = this.live;
    this.live = undefined;
    return slot;
  }

  /** After a restore (a spilled state, a shared prefix): the restored state's decodes stand for the cache's history. */
  restoreLog(state: Pick<SpilledState, "decodes">): void {
    for (const d of state.decodes) this.log.record(d.start, d.tokens);
  }

  clearLog(): void {
    this.log.clear();
  }

  /** How much of the cache a prompt of `length` tokens keeps, `common` of them cached (DecodeLog.reusable). */
  reusable(common: number, length: number): number {
    return this.log.reusable(common, length);
  }

  replay(): CacheReplay {
    const replay = this.log.replay(this.live?.sequence.nextTokenIndex ?? 0);
    return this.activatedFrom === undefined || this.activatedFrom >= replay.length
      ? replay
      : { ...replay, activatedFrom: this.activatedFrom };
  }

  /** Tokens whose KV the lane holds (its live sequence's; none when spilled or gone). */
  get tokens(): readonly Token[] {
    return this.live?.sequence.contextTokens ?? [];
  }
}
