import { LRUCache } from "lru-cache";
import type { CacheStats, EngineLogger, WeightSet } from "../../../engine/index.js";
import { EngineCapacityError } from "../../../engine/index.js";
import type { ContextMaker, EngineContext } from "../decoding/EngineContext.js";
import { Mutex } from "../../../mutex.js";
import type { Lane, Slot } from "./Lane.js";
import { SlotLock } from "./SlotLock.js";
import type { SpilledState, SpillStore } from "./SpillStore.js";

export interface LanePoolOptions {
  maxContexts: number;
  sequencesPerContext: number;
  /** Makes a new context, home to the lanes of one weight set. */
  contexts: ContextMaker;
  /** Where idle lanes go when their sequence is needed; without it they are dropped. */
  spill: SpillStore | undefined;
  logger: EngineLogger;
}

export type PoolStats = Pick<
  CacheStats,
  "contexts" | "sequences" | "idleLanes" | "spilledLanes" | "spilledBytes" | "evictions"
>;

/**
 * The sequences of every context, handed to lanes. A lane that is a session's active one keeps its sequence;
 * an idle lane (its session moved to other weights) keeps its sequence only until somebody needs one: then
 * the least recently used idle lane is spilled to disk or dropped. Lanes go where their batches run: each context is
 * home to the weight set it was created for, so sessions under one set decode together in its rounds and the context
 * keeps its weights applied from round to round.
 */
export class LanePool {
  readonly contexts: EngineContext[] = [];
  /** Idle lanes holding a sequence, least recently parked first. Never full: each holds one of the pool's sequences. */
  private readonly idle: LRUCache<Lane, true>;
  private readonly spilled = new Set<Lane>();
  private readonly allocating = new Mutex();
  private readonly evictions = { spilled: 0, dropped: 0 };

  constructor(private readonly opts: LanePoolOptions) {
    this.idle = new LRUCache({ max: opts.maxContexts * opts.sequencesPerContext });
  }

  /**
   * A fresh sequence for a lane under `weights`: a free one in the context home to them, else a
   * new context home to them while there may be more, else a free one anywhere, else the least recently used idle
   * lane's. Idle lanes only ever use sequences that exist anyway: keeping a cache never makes the engine allocate a
   * context (and its KV memory).
   */
  acquire(weights: WeightSet): Promise<Slot> {
    return this.allocating.run(async () => {
      for (;;) {
        const free = this.free(weights);
        if (free?.home.appliesAs(weights)) return newSlot(free);
        const homeless = !this.contexts.some((c) => c.home.appliesAs(weights));
        if (this.contexts.length < this.opts.maxContexts && (homeless || !free)) {
          const created = await this.opts.contexts.create(this.contexts.length, weights);
          this.contexts.push(created);
          return newSlot(created);
        }
        if (free) return newSlot(free);
        const victim = this.leastRecentlyUsed();
        if (!victim) throw new EngineCapacityError(this.opts.maxContexts * this.opts.sequencesPerContext);
        await this.evict(victim);
      }
    });
  }

  /**
   * A free sequence of a context that exists (home to `weights` if one has one free), or undefined: no idle lane is
   * evicted and no context created for it (evaluation ahead of time must never push out a cache somebody left, nor
   * allocate memory).
   */
  acquireFree(weights: WeightSet): Slot | undefined {
    const free = this.free(weights);
    return free && newSlot(free);
  }

  /** The context with a free sequence: home to `weights` if one is, else the one with the most free. */
  private free(weights: WeightSet): EngineContext | undefined {
    let best: EngineContext | undefined;
    for (const c of this.contexts) {
      if (c.sequencesLeft === 0) continue;
      if (c.home.appliesAs(weights)) return c;
      if (!best || c.sequencesLeft > best.sequencesLeft) best = c;
    }
    return best;
  }

  /** The lane is in use (active in its session): it keeps its sequence. */
  use(lane: Lane): void {
    this.idle.delete(lane);
    lane.speculative = false;
  }

  /** The lane's session moved to other weights: its sequence may be taken (the most recently parked last). */
  park(lane: Lane): void {
    if (!lane.slot) return;
    this.idle.set(lane, true);
  }

  /**
   * Saves the lane's cache to the spill store if there is one (it stays reusable from there), then takes
   * its sequence away and returns it, still holding the lane's KV. Caller holds the lane's sequence lock.
   */
  async takeSequence(lane: Lane): Promise<Slot | undefined> {
    this.idle.delete(lane);
    const slot = lane.slot;
    if (!slot) return undefined;
    // a lane nobody used yet was a guess: cheaper to drop than to write out under the caller's lock
    const spill = lane.speculative ? undefined : this.opts.spill;
    const forget = (state: SpilledState) => {
      if (lane.spilled === state) this.unspill(lane);
    };
    const state = spill
      ? await spill.save(slot.sequence, lane.replay().decodes, forget).catch((err) => {
          this.opts.logger.warn({ err: (err as Error).message }, "spilling a KV lane failed; dropping it");
          return undefined;
        })
      : undefined;
    lane.spilled = state;
    if (state) this.spilled.add(lane);
    this.evictions[state ? "spilled" : "dropped"]++;
    return lane.detach();
  }

  /**
   * Loads the lane's spilled state into the (empty) sequence it now has; false when it has none. An
   * unreadable state leaves the sequence empty: it costs a rebuild, never a wrong cache. Caller holds the
   * lane's sequence lock.
   */
  async restore(lane: Lane): Promise<boolean> {
    const state = this.unspill(lane);
    if (!state) return false;
    const sequence = lane.slot!.sequence;
    try {
      await this.opts.spill!.restore(state, sequence);
      lane.restoreLog(state);
    } catch (err) {
      this.opts.logger.warn({ err: (err as Error).message }, "restoring a spilled KV lane failed; rebuilding it");
      await sequence.clearHistory();
      lane.clearLog();
    }
    return true;
  }

  /** The lane no longer counts as spilled; its state, if it had one, is the caller's to load or remove. */
  private unspill(lane: Lane): SpilledState | undefined {
    const state = lane.spilled;
    lane.spilled = undefined;
    this.spilled.delete(lane);
    return state;
  }

  /**
   * Frees everything the lane holds (its session closed, or its weights left the library). Caller holds its sequence
   * lock if live.
   */
  async drop(lane: Lane): Promise<void> {
    this.idle.delete(lane);
    const state = this.unspill(lane);
    if (state) this.opts.spill?.remove(state);
    await lane.detach()?.sequence.dispose();
  }

  /** Idle lanes that still hold a sequence (and so keep their adapter versions in use). */
  idleLanes(): Lane[] {
    return [...this.idle.keys()];
  }

  stats(): PoolStats {
    return {
      contexts: this.contexts.length,
      sequences: this.contexts.length * this.opts.sequencesPerContext,
      idleLanes: this.idle.size,
      spilledLanes: this.spilled.size,
      // the spilled lanes' own states (the store also holds shared prompt prefixes)
      spilledBytes: [...this.spilled].reduce((bytes, lane) => bytes + (lane.spilled?.bytes ?? 0), 0),
      evictions: { ...this.evictions },
    };
  }

  /**
   * The idle lane to take a sequence from: a speculative one first (work ahead of time never displaces a cache
   * a session left), else the least recently used; either preferring one whose context is not busy (its lock
   * would hold up every allocation).
   */
  private leastRecentlyUsed(): Lane | undefined {
    let oldest: Lane | undefined;
    for (const speculative of [true, false]) {
      for (const lane of this.idle.rkeys()) {
        if (lane.speculative !== speculative) continue;
        if (!lane.slot?.lock.depth) return lane;
        oldest ??= lane;
      }
      if (oldest) return oldest;
    }
    return undefined;
  }

  private async evict(lane: Lane): Promise<void> {
    const slot = lane.slot;
    if (!slot) return void this.idle.delete(lane);
    const evicted = await slot.lock.run(async () => {
      // re-checked under the lock: its session may have made it active again, or dropped it, meanwhile
      if (!this.idle.has(lane) || lane.slot !== slot) return false;
      await this.takeSequence(lane);
      await slot.sequence.dispose();
      return true;
    });
    if (evicted)
      this.opts.logger.debug(
        { lane: lane.weights.key, owner: lane.owner, spilled: !!lane.spilled },
        "idle KV lane evicted",
      );
  }

  dispose(): void {
    this.opts.spill?.dispose();
  }
}

const newSlot = (context: EngineContext): Slot => ({
  context,
  sequence: context.createSequence(),
  lock: new SlotLock(),
});
