import type { Token } from "node-llama-cpp";
import type { SwitchReport, WeightSet } from "../../../engine/index.js";
import { EngineCapacityError } from "../../../engine/index.js";
import type { SwitchPlan } from "../deciding/SwitchStrategy.js";
import type { EngineParts } from "./EngineParts.js";
import { Lane, type Slot } from "./Lane.js";
import { abandonLane, now, rebuildLane, syncLane, type Synced } from "./laneSync.js";
import type { SessionLanes } from "./SessionLanes.js";
import { cutSequence } from "./slidingWindow.js";

/** What carrying out a switch plan cost: the sync, the wait for the sequence lock, and which plan ran. */
export interface SwitchOutcome {
  sync: Synced;
  queueMs: number;
  strategy: SwitchReport["strategy"];
}

/**
 * Carries out a session's switch plan on its lanes (the session holds its switch lock): the active lane rebuilt in
 * place, or the session moved onto the lane of the new weights, each under the lane's sequence lock. Whatever fails,
 * the session keeps a correct cache under its previous weights.
 */
export class LaneSwitch {
  constructor(
    private readonly id: number,
    private readonly parts: EngineParts,
    private readonly lanes: SessionLanes,
  ) {}

  /** Applies the strategy's decision for a switch to `to` over `tokens`, the whole rendered history. */
  carryOut(plan: SwitchPlan, to: WeightSet, tokens: Token[], queued: number): Promise<SwitchOutcome> {
    if (plan.kind === "rebuild") return this.rebuildInPlace(to, tokens, queued);
    if (plan.kind === "continue") return this.continueOn(plan.home, to, tokens, queued);
    this.lanes.active.weights = to;
    return Promise.resolve({
      sync: { reused: this.lanes.cachedTokens, evaluated: 0, restored: 0, shared: 0, ms: 0 },
      queueMs: 0,
      strategy: "unchanged",
    });
  }

  /**
   * The active lane takes the new weights and is evaluated again; on a failure it is an empty cache under the previous
   * ones.
   */
  private async rebuildInPlace(to: WeightSet, tokens: Token[], queued: number): Promise<SwitchOutcome> {
    const lane = this.lanes.active;
    const slot = this.lanes.liveSlot();
    const release = await slot.lock.acquire();
    try {
      const queueMs = now() - queued;
      const before = { weights: lane.weights, activatedFrom: lane.activatedFrom };
      lane.weights = to;
      try {
        // an activated LoRA's history is evaluated under the base up to its invocation point, then under it
        const sync = await rebuildLane(this.parts, lane, tokens, this.lanes.planFor(lane, tokens));
        return { sync, queueMs, strategy: "rebuild" };
      } catch (err) {
        lane.weights = before.weights;
        lane.activatedFrom = before.activatedFrom === undefined ? undefined : Infinity;
        await slot.sequence.clearHistory();
        lane.clearLog();
        throw err;
      }
    } finally {
      release();
    }
  }

  /**
   * Moves the session onto the lane of `home` (its own lane for `to`, or the base lane for an activated LoRA),
   * evaluating only the tokens appended since it was last used. When every sequence is taken by active lanes, the
   * previous lane is spilled and gives its sequence to the new one. On a failure the session keeps a correct cache
   * under its previous weights.
   */
  private async continueOn(home: WeightSet, to: WeightSet, tokens: Token[], queued: number): Promise<SwitchOutcome> {
    const { lanes } = this;
    if (lanes.active.activatedFrom !== undefined) await this.deactivate();
    const previous = lanes.active;
    const activating = !home.equals(to);
    for (;;) {
      let lane = lanes.byKey.get(home.key);
      if (lane?.empty) lanes.byKey.delete(home.key);
      if (!lane || lane.empty) lane = new Lane(this.id, home);
      const live = lane.slot;
      const fresh = live ? undefined : await this.freshSlot(lane.weights);
      const slot = live ?? fresh ?? lanes.liveSlot();
      const release = await slot.lock.acquire();
      let outcome: SwitchOutcome | undefined;
      try {
        // evicted while we waited for the lock: go round again
        if (!live || lane.slot === live)
          outcome = await this.syncOnto(lane, slot, fresh, previous, activating, to, tokens, queued);
      } finally {
        release();
      }
      if (!outcome) continue;
      if (activating) lanes.byKey.delete(home.key);
      lanes.byKey.set(to.key, lane);
      lanes.activate(lane);
      if (previous !== lane) {
        this.parts.pool.park(previous);
        if (previous.empty) lanes.byKey.delete(previous.weights.key);
      }
      return outcome;
    }
  }

  /** A new sequence for a lane of `weights`, or undefined when every sequence is held by an active lane. */
  private freshSlot(weights: WeightSet): Promise<Slot | undefined> {
    return this.parts.pool
      .acquire(weights)
      .catch((err) => (err instanceof EngineCapacityError ? undefined : Promise.reject(err)));
  }

  /**
   * With the sequence lock held: gives `lane` its sequence (fresh, its own, or the previous lane's in place) and brings
   * it up to `tokens` under `to`. On a failure the lane gives back what it took.
   */
  private async syncOnto(
    lane: Lane,
    slot: Slot,
    fresh: Slot | undefined,
    previous: Lane,
    activating: boolean,
    to: WeightSet,
    tokens: Token[],
    queued: number,
  ): Promise<SwitchOutcome> {
    const { pool } = this.parts;
    const queueMs = now() - queued;
    const home = lane.weights;
    try {
      if (fresh) lane.attach(fresh);
      else if (!lane.slot) {
        // in place: the previous lane's cache is saved (or dropped) and its sequence emptied for this one
        const taken = (await pool.takeSequence(previous))!;
        lane.attach(taken);
        await taken.sequence.clearHistory();
      }
      pool.use(lane);
      // an activated LoRA's lane is the base lane: all of it is the base's until the sync evaluates from the point
      if (activating) lane.activatedFrom = Infinity;
      lane.weights = to;
      return {
        sync: await syncLane(this.parts, lane, tokens, this.lanes.planFor(lane, tokens)),
        queueMs,
        strategy: "reuse",
      };
    } catch (err) {
      if (activating) toBaseLane(lane, home);
      if (lane === previous) {
        await slot.sequence.clearHistory(); // an empty cache is still a correct one
        lane.clearLog();
      } else await abandonLane(this.parts, lane, previous);
      throw err;
    }
  }

  /**
   * The active lane is an activated LoRA's (the base lane with the adapter's KV from the invocation point on):
   * erases that part and makes it the base lane again, before the switch goes anywhere.
   */
  private async deactivate(): Promise<void> {
    const lane = this.lanes.active;
    const slot = this.lanes.liveSlot();
    const release = await slot.lock.acquire();
    try {
      // a cut past the sliding window leaves the lane empty: its next sync evaluates it again
      await cutSequence(slot.sequence, lane.activatedFrom!, this.lanes.rules.cutFloor);
      this.lanes.byKey.delete(lane.weights.key);
      toBaseLane(lane, this.lanes.baseWeights());
      this.lanes.byKey.set(lane.weights.key, lane);
    } finally {
      release();
    }
  }
}

/** The lane becomes the session's plain base lane (an activated LoRA's part is gone or never came). */
function toBaseLane(lane: Lane, base: WeightSet): void {
  lane.weights = base;
  lane.activatedFrom = undefined;
}
