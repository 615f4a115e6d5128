import type { Token } from "../../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../src/engine/index.js";
import { EngineCapacityError } from "../../../src/engine/index.js";
import { Lane } from "../../cache/Lane.js";
import type { LaneKey } from "../../cache/LaneKey.js";
import { abandonLane, continueLane, now } from "../laneSync.js";
import type { SwitchingSession, SwitchOutcome, SwitchStrategy } from "./SwitchStrategy.js";

/**
 * One lane per weight set: continue the session's lane for the new weights if it has one (live, or spilled
 * to disk), evaluating only the tokens appended since; else start one. The previous lane stays behind,
 * idle, for the next return. When every sequence is taken by active lanes, the previous lane is spilled and
 * gives its sequence to the new one.
 */
export class ReuseStrategy implements SwitchStrategy {
  async switch(session: SwitchingSession, key: LaneKey, to: readonly AdapterVersion[], tokens: Token[], queued: number): Promise<SwitchOutcome> {
    const { host, lanes } = session;
    const previous = session.activeLane();
    for (;;) {
      let target = lanes.get(key.toString());
      if (target?.empty) lanes.delete(key.toString());
      if (!target || target.empty) target = new Lane(session.id, key, to);
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
          lane.versions = to; // equal keys name equal versions
          return { sync: await continueLane(host, lane, tokens), queueMs, strategy: "reuse" as const };
        } catch (err) {
          await abandonLane(host, lane, previous);
          throw err;
        }
      });
      if (!result) continue;
      lanes.set(key.toString(), lane);
      session.activate(lane);
      host.pool.park(previous);
      if (previous.empty) lanes.delete(previous.key.toString());
      return result;
    }
  }
}
