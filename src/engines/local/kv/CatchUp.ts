import type { Token } from "node-llama-cpp";
import type { BackgroundWork, HistorySoFar } from "../../../engine/index.js";
import { commonPrefixLength } from "../../../engine/index.js";
import type { Mutex } from "../../../mutex.js";
import type { BackgroundSource } from "../decoding/BackgroundScheduler.js";
import { Lane } from "./Lane.js";
import { settledTokens } from "../../../llamaCpp/render.js";
import type { EngineParts } from "./EngineParts.js";
import { extendLane, now } from "./laneSync.js";
import type { SessionLanes } from "./SessionLanes.js";

/**
 * Evaluation ahead of time for one session: while nobody waits on the engine, the lanes of the weight sets the
 * session was told it will need next are brought up to its history, so their switch finds little left to do.
 * The engine's background scheduler calls `catchUpStep`; the session moves the frontier with every call.
 */
export class CatchUp implements BackgroundSource {
  /** The weight sets (aliases) the session will probably need next, most likely first. */
  private anticipated: readonly (readonly string[])[] = [];
  private readonly done: BackgroundWork = { tokens: 0, batches: 0, ms: 0 };
  /**
   * The last prompt the session was given, but its last token (what a synced lane holds): what background work
   * brings other lanes to. Generated tokens are left out: a turn can re-render otherwise (text that is not valid
   * UTF-8), and once recorded it is in the next prompt. A hint's history so far moves it on (`soFar`).
   */
  private frontier: readonly Token[] = [];
  /** The history so far of the last hint, rendered into `frontier` by the first background step that needs it. */
  private soFar: HistorySoFar | undefined;

  constructor(
    private readonly parts: EngineParts,
    private readonly lanes: SessionLanes,
    /** The session's switch lock: lanes are created, parked and dropped only under it. */
    private readonly switching: Mutex,
    private readonly contextSize: number,
  ) {}

  /** The session was given `tokens` as its prompt: background work now brings other lanes up to it. */
  moveFrontier(tokens: readonly Token[]): void {
    this.frontier = tokens.slice(0, -1);
    this.soFar = undefined;
  }

  /** See `EngineSession.anticipate`. */
  anticipate(next: readonly (readonly string[])[], soFar?: HistorySoFar): void {
    this.anticipated = next.map((set) => [...set]);
    this.soFar = soFar;
    if (next.length) this.parts.scheduler.wake();
  }

  work(): BackgroundWork {
    return { ...this.done };
  }

  /**
   * One background step (the engine's scheduler calls it only while no caller's evaluation runs): the first
   * anticipated weight set whose live lane lags behind the session's last prompt gets one decode of at most the
   * scheduler's batch; one without a lane gets a new one in a free sequence (never an evicted one), started
   * from the shared prompt prefix when one is saved. Spilled lanes wait for their switch (restoring one would
   * take a sequence). An activated LoRA needs nothing ahead: its switch runs on the base lane from its
   * invocation point. False when there is nothing to do.
   */
  async catchUpStep(): Promise<boolean> {
    if (this.lanes.isClosed || !this.anticipated.length || this.switching.depth > 0) return false;
    return this.switching.run(async () => {
      if (this.lanes.isClosed || this.parts.scheduler.mustYield) return false;
      this.settleFrontier();
      const active = this.lanes.active;
      const frontier = this.frontier;
      if (!frontier.length) return false;
      for (const aliases of this.anticipated) {
        const versions = this.lanes.resolveAll(aliases);
        if (!versions || this.lanes.activates(versions)) continue;
        const weights = this.lanes.rules.weightsOf(versions);
        // the active lane, or the base lane while an activated LoRA runs on it
        if (weights.equals(active.weights) || (versions.length === 0 && active.activatedFrom !== undefined)) continue;
        let lane = this.lanes.byKey.get(weights.key);
        if (lane?.empty) this.lanes.byKey.delete(weights.key);
        else if (lane && !lane.slot) continue;
        if (lane && !lane.empty && commonPrefixLength(lane.tokens, frontier) === frontier.length) continue;
        if (!lane || lane.empty) {
          const free = this.parts.pool.acquireFree(weights);
          if (!free) continue;
          lane = new Lane(this.lanes.sessionId, weights);
          lane.speculative = true;
          lane.attach(free);
          this.lanes.byKey.set(weights.key, lane);
          this.parts.pool.park(lane);
          this.parts.scheduler.totals.lanesStarted++;
        }
        return this.extend(lane, active, frontier);
      }
      return false;
    });
  }

  /**
   * Renders the hint's history so far into the frontier (once, in a background step: a caller never pays for
   * it). The model's turn and its calls are settled while the tools run; only their results are not.
   */
  private settleFrontier(): void {
    const soFar = this.soFar;
    if (!soFar) return;
    this.soFar = undefined;
    try {
      const settled = settledTokens(this.parts.model, this.parts.chatWrapper, soFar);
      if (settled.length <= this.contextSize) this.frontier = settled;
    } catch (err) {
      this.parts.scheduler.opts.logger.debug(
        { err: (err as Error).message },
        "history so far not rendered; background work stops at the last prompt",
      );
    }
  }

  /** One decode extending `lane` towards `frontier` under its sequence lock, unless a caller arrived meanwhile. */
  private async extend(lane: Lane, active: Lane, frontier: readonly Token[]): Promise<boolean> {
    const slot = lane.slot!;
    const work = this.parts.scheduler;
    return slot.lock.runBackground(async () => {
      if (work.mustYield) {
        work.totals.yields++;
        return false;
      }
      if (lane.slot !== slot || this.lanes.byKey.get(lane.weights.key) !== lane) return false;
      const started = now();
      const decoded = await extendLane(
        this.parts,
        lane,
        this.lanes.rules.backgroundWeights(lane.weights, active.weights),
        frontier,
        work.batchTokens(),
        { prefix: this.lanes.prefixPlan(lane, undefined), cutFloor: this.lanes.rules.cutFloor },
      );
      if (decoded === undefined) return false;
      const ms = now() - started;
      work.recordBatch(decoded, ms);
      this.done.tokens += decoded;
      this.done.batches++;
      this.done.ms += ms;
      return true;
    });
  }
}
