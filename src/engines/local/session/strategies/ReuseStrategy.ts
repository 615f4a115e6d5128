import type { Token } from "../../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../../engine/index.js";
import { EngineCapacityError } from "../../../../engine/index.js";
import { Lane } from "../../cache/Lane.js";
import type { LaneKey } from "../../cache/LaneKey.js";
import { abandonLane, continueLane, now } from "../laneSync.js";
import type { SwitchingSession, SwitchOutcome, SwitchStrategy } from "./SwitchStrategy.js";

/**
 * One lane per weight set: continue the session's lane for the new weights if it has one (live, or spilled
 * to disk), evaluating only the tokens appended since; else start one (from the shared prompt prefix when
 * one is saved). The previous lane stays behind, idle, for the next return. When every sequence is taken by
 * active lanes, the previous lane is spilled and gives its sequence to the new one.
 *
 * An activated LoRA has no lane of its own: it runs on the session's base lane, whose cache before the
 * invocation point is exactly what the adapter needs, so a switch evaluates only the tokens from that point
 * on under the adapter; leaving it erases them again and the lane is the base lane once more.
 */
export class ReuseStrategy implements SwitchStrategy {
  async switch(session: SwitchingSession, key: LaneKey, to: readonly AdapterVersion[], tokens: Token[], queued: number): Promise<SwitchOutcome> {
    const { host, lanes } = session;
    if (session.activeLane().activatedFrom !== undefined) await this.deactivate(session);
    const previous = session.activeLane();
    const activating = session.activates(to);
    // the lane that serves `to`: its own, or the base lane for an activated LoRA
    const home = activating ? session.baseKey() : key;
    for (;;) {
      let target = lanes.get(home.toString());
      if (target?.empty) lanes.delete(home.toString());
      if (!target || target.empty) target = new Lane(session.id, home, activating ? [] : to);
      const lane = target;
      const live = lane.slot;
      const fresh = live ? undefined : await host.pool.acquire().catch((err) => (err instanceof EngineCapacityError ? undefined : Promise.reject(err)));
      const slot = live ?? fresh ?? session.liveSlot();
      const result = await slot.context.lock.run(async () => {
        const queueMs = now() - queued;
        if (live && lane.slot !== live) return undefined; // evicted while we waited for the lock: go round again
        try {
          if (fresh) lane.attach(fresh);
          else if (!live) {
            // in place: the previous lane's cache is saved (or dropped) and its sequence emptied for this one
            const taken = (await host.pool.takeSequence(previous))!;
            lane.attach(taken);
            await taken.sequence.clearHistory();
          }
          host.pool.use(lane);
          if (activating) {
            lane.key = key;
            lane.activatedFrom = Infinity; // all of it is the base's until the sync evaluates from the invocation point
          }
          lane.versions = to; // equal keys name equal versions
          return { sync: await continueLane(host, lane, tokens, session.planFor(lane, tokens)), queueMs, strategy: "reuse" as const };
        } catch (err) {
          if (activating) this.rekeyToBase(lane, home);
          if (lane === previous) {
            await lane.slot!.sequence.clearHistory(); // an empty cache is still a correct one
            lane.clearLog();
          } else await abandonLane(host, lane, previous);
          throw err;
        }
      });
      if (!result) continue;
      if (activating) lanes.delete(home.toString());
      lanes.set(key.toString(), lane);
      session.activate(lane);
      if (previous !== lane) {
        host.pool.park(previous);
        if (previous.empty) lanes.delete(previous.key.toString());
      }
      return result;
    }
  }

  /**
   * The active lane is an activated LoRA's (the base lane with the adapter's KV from the invocation point on):
   * erases that part and makes it the base lane again, before the switch goes anywhere.
   */
  private async deactivate(session: SwitchingSession): Promise<void> {
    const lane = session.activeLane();
    const slot = session.liveSlot();
    await slot.context.lock.run(async () => {
      const from = lane.activatedFrom!;
      if (from < slot.sequence.nextTokenIndex) await slot.sequence.eraseContextTokenRanges([{ start: from, end: slot.sequence.nextTokenIndex }]);
      session.lanes.delete(lane.key.toString());
      this.rekeyToBase(lane, session.baseKey());
      session.lanes.set(lane.key.toString(), lane);
    });
  }

  private rekeyToBase(lane: Lane, base: LaneKey): void {
    lane.key = base;
    lane.versions = [];
    lane.activatedFrom = undefined;
  }
}
