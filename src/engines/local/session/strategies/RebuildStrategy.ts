import type { Token } from "../../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../../engine/index.js";
import type { LaneKey } from "../../cache/LaneKey.js";
import { now, rebuildLane } from "../laneSync.js";
import type { SwitchingSession, SwitchOutcome, SwitchStrategy } from "./SwitchStrategy.js";

/** The paper's: the session's one lane takes the new weights; none of its cached keys/values may be reused (nor a shared prefix). */
export class RebuildStrategy implements SwitchStrategy {
  async switch(session: SwitchingSession, key: LaneKey, to: readonly AdapterVersion[], tokens: Token[], queued: number): Promise<SwitchOutcome> {
    const lane = session.activeLane();
    const slot = session.liveSlot();
    return slot.context.lock.run(async () => {
      const queueMs = now() - queued;
      const before = { key: lane.key, versions: lane.versions, activatedFrom: lane.activatedFrom };
      lane.key = key;
      lane.versions = to;
      try {
        // an activated LoRA's history is evaluated under the base up to its invocation point, then under it
        return { sync: await rebuildLane(session.host, lane, tokens, session.planFor(lane, tokens)), queueMs, strategy: "rebuild" };
      } catch (err) {
        lane.key = before.key;
        lane.versions = before.versions;
        lane.activatedFrom = before.activatedFrom === undefined ? undefined : Infinity;
        await slot.sequence.clearHistory();
        lane.clearLog();
        throw err;
      }
    });
  }
}
