import type { LlamaContextSequence, Token } from "../llama/nodeLlamaCpp.js";
import type {
  AdapterVersion,
  BackgroundWork,
  Conversation,
  EngineSession,
  GenerateOptions,
  GenerateResult,
  HistorySoFar,
  LaneState,
  LogProbs,
  PrefillReport,
  SwitchReport,
  WeightSet,
} from "../../../engine/index.js";
import { aliasesOf, ContextOverflowError, EngineCapacityError } from "../../../engine/index.js";
import { Mutex } from "../../../mutex.js";
import type { CacheReplay } from "../cache/DecodeLog.js";
import { Lane } from "../cache/Lane.js";
import { weightSetKey } from "../context/EngineContext.js";
import type { LaneKey } from "../cache/LaneKey.js";
import { renderConversation } from "../chat/render.js";
import { CatchUp } from "./CatchUp.js";
import type { LocalEngineServices } from "./LocalEngineServices.js";
import { generateTurn } from "./generate.js";
import { abandonLane, now, rebuildLane, syncLane, weightsLabel, type Synced } from "./laneSync.js";
import { nextTokenAfter } from "./logProbs.js";
import { cutSequence } from "../cache/slidingWindow.js";
import { SessionLanes } from "./SessionLanes.js";
import type { SessionRules } from "./SessionRules.js";
import type { SwitchPlan } from "./SwitchStrategy.js";

/** What carrying out a switch plan cost: the sync, the wait for the sequence lock, and which plan ran. */
interface SwitchOutcome {
  sync: Synced;
  queueMs: number;
  strategy: SwitchReport["strategy"];
}

/**
 * One conversation on the local engine: its history's KV cache, held in lanes (`SessionLanes`: one per weight
 * set under `reuse`, a single one rebuilt on each switch under `rebuild`), and its active weights. The weight
 * switch is carried out here: the engine's `SwitchStrategy` decides what happens to the caches, and this session
 * applies the decision. Every evaluation holds its lane's sequence lock and sets the lane's decode weights (laneSync);
 * each decode then waits for a round of those weights in its context (`DecodeRounds`), so sessions under the same
 * weights decode in one batch and sessions on different adapters share a context without ever decoding under each
 * other's weights. Generation is in generate.ts, evaluation ahead of time in `CatchUp`.
 */
export class LocalEngineSession implements EngineSession {
  /** Switches, close and background steps, one at a time: lanes are created, parked and dropped only under it. */
  private readonly switching = new Mutex();
  /** Tokens one lane holds at most (every sequence of the engine has the same size). */
  readonly contextSize: number;
  private readonly lanes: SessionLanes;
  private readonly catchUp: CatchUp;

  constructor(
    readonly id: number,
    private readonly services: LocalEngineServices,
    rules: SessionRules,
    first: Lane,
  ) {
    this.contextSize = first.slot!.sequence.contextSize;
    this.lanes = new SessionLanes(id, services, rules, first);
    this.catchUp = new CatchUp(services, this.lanes, this.switching, this.contextSize);
    services.work.add(this.catchUp);
  }

  get activeAdapter(): string | null {
    return weightsLabel(this.lanes.active.versions);
  }

  get activeVersions(): readonly AdapterVersion[] {
    return this.lanes.active.versions;
  }

  get cachedTokens(): number {
    return this.lanes.cachedTokens;
  }

  /** How the active lane's cache was computed: what a reference context must replay to reproduce it exactly. */
  cacheReplay(): CacheReplay {
    return this.lanes.cacheReplay();
  }

  /** Drops the lanes no switch can reach any more (their weights were refreshed or removed). */
  dropUnreachableLanes(): Promise<void> {
    // between switches: a switch (or a step ahead of time) never finds a lane half dropped
    return this.switching.run(() => this.lanes.dropUnreachable());
  }

  laneStates(): LaneState[] {
    return this.lanes.laneStates();
  }

  async switchWeights(to: WeightSet, conversation: Conversation): Promise<SwitchReport> {
    const aliases = aliasesOf(to);
    this.lanes.ensureOpen();
    this.lanes.ensureApplicable(aliases.map((a) => this.services.resolve(a))); // refused before anything changes
    const tokens = this.lanes.render(conversation);
    this.ensureFits(tokens.length);
    return this.services.work.foreground(() => {
      const queued = now();
      return this.switching.run(async () => {
        this.lanes.ensureOpen();
        // resolved and pinned with no await between: a refresh cannot free them before the session holds them
        const versions = aliases.map((a) => this.services.resolve(a));
        this.lanes.ensureApplicable(versions);
        this.services.pin(versions);
        try {
          const key = this.lanes.rules.keyOf(versions);
          const from = this.activeAdapter;
          const same = key.equals(this.lanes.active.key);
          if (!same) this.lanes.rememberPrompt(conversation);
          const plan: SwitchPlan = same
            ? { kind: "unchanged" }
            : this.lanes.rules.strategy.plan({
                key,
                activating: this.lanes.activates(versions),
                baseKey: this.lanes.baseKey(),
              });
          const { sync, queueMs, strategy } = await this.carryOut(plan, key, versions, tokens, queued);
          this.catchUp.moveFrontier(tokens);
          queueMicrotask(() => this.services.versionsReleased());
          return {
            from,
            to: weightsLabel(versions),
            strategy,
            switchMs: Math.max(0, now() - queued - queueMs - sync.ms),
            rebuild: {
              tokens: sync.evaluated,
              reused: sync.reused,
              restored: sync.restored,
              shared: sync.shared,
              ms: sync.ms,
            },
            queueMs,
          };
        } finally {
          this.services.unpin(versions);
        }
      });
    });
  }

  /**
   * Applies the strategy's decision for a switch to `to` (named exactly by `key`) over `tokens`, the whole rendered
   * history.
   */
  private carryOut(
    plan: SwitchPlan,
    key: LaneKey,
    to: readonly AdapterVersion[],
    tokens: Token[],
    queued: number,
  ): Promise<SwitchOutcome> {
    if (plan.kind === "rebuild") return this.rebuildInPlace(key, to, tokens, queued);
    if (plan.kind === "continue") return this.continueOn(plan.home, key, to, tokens, queued);
    const lane = this.lanes.active;
    lane.key = key;
    lane.versions = to;
    return Promise.resolve({
      sync: { reused: this.cachedTokens, evaluated: 0, restored: 0, shared: 0, ms: 0 },
      queueMs: 0,
      strategy: "unchanged",
    });
  }

  /**
   * The active lane takes the new weights and is evaluated again; on a failure it is an empty cache under the previous
   * ones.
   */
  private async rebuildInPlace(
    key: LaneKey,
    to: readonly AdapterVersion[],
    tokens: Token[],
    queued: number,
  ): Promise<SwitchOutcome> {
    const lane = this.lanes.active;
    const slot = this.lanes.liveSlot();
    return slot.lock.run(async () => {
      const queueMs = now() - queued;
      const before = { key: lane.key, versions: lane.versions, activatedFrom: lane.activatedFrom };
      lane.key = key;
      lane.versions = to;
      try {
        // an activated LoRA's history is evaluated under the base up to its invocation point, then under it
        return {
          sync: await rebuildLane(this.services, lane, tokens, this.lanes.planFor(lane, tokens)),
          queueMs,
          strategy: "rebuild",
        };
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

  /**
   * Moves the session onto the lane of `home` (its own lane for `key`, or the base lane for an activated LoRA),
   * evaluating only the tokens appended since it was last used. When every sequence is taken by active lanes, the
   * previous lane is spilled and gives its sequence to the new one. On a failure the session keeps a correct cache
   * under its previous weights.
   */
  private async continueOn(
    home: LaneKey,
    key: LaneKey,
    to: readonly AdapterVersion[],
    tokens: Token[],
    queued: number,
  ): Promise<SwitchOutcome> {
    const { services, lanes } = this;
    if (lanes.active.activatedFrom !== undefined) await this.deactivate();
    const previous = lanes.active;
    const activating = !home.equals(key);
    for (;;) {
      let target = lanes.byKey.get(home.toString());
      if (target?.empty) lanes.byKey.delete(home.toString());
      if (!target || target.empty) target = new Lane(this.id, home, activating ? [] : to);
      const lane = target;
      const live = lane.slot;
      const fresh = live
        ? undefined
        : await services.pool
            .acquire(weightSetKey(lane.versions))
            .catch((err) => (err instanceof EngineCapacityError ? undefined : Promise.reject(err)));
      const slot = live ?? fresh ?? lanes.liveSlot();
      const result = await slot.lock.run(async () => {
        const queueMs = now() - queued;
        if (live && lane.slot !== live) return undefined; // evicted while we waited for the lock: go round again
        try {
          if (fresh) lane.attach(fresh);
          else if (!live) {
            // in place: the previous lane's cache is saved (or dropped) and its sequence emptied for this one
            const taken = (await services.pool.takeSequence(previous))!;
            lane.attach(taken);
            await taken.sequence.clearHistory();
          }
          services.pool.use(lane);
          if (activating) {
            lane.key = key;
            lane.activatedFrom = Infinity; // all of it is the base's until the sync evaluates from the invocation point
          }
          lane.versions = to; // equal keys name equal versions
          return {
            sync: await syncLane(services, lane, tokens, lanes.planFor(lane, tokens)),
            queueMs,
            strategy: "reuse" as const,
          };
        } catch (err) {
          if (activating) rekeyToBase(lane, home);
          if (lane === previous) {
            await lane.slot!.sequence.clearHistory(); // an empty cache is still a correct one
            lane.clearLog();
          } else await abandonLane(services, lane, previous);
          throw err;
        }
      });
      if (!result) continue;
      if (activating) lanes.byKey.delete(home.toString());
      lanes.byKey.set(key.toString(), lane);
      lanes.activate(lane);
      if (previous !== lane) {
        services.pool.park(previous);
        if (previous.empty) lanes.byKey.delete(previous.key.toString());
      }
      return result;
    }
  }

  /**
   * The active lane is an activated LoRA's (the base lane with the adapter's KV from the invocation point on):
   * erases that part and makes it the base lane again, before the switch goes anywhere.
   */
  private async deactivate(): Promise<void> {
    const lane = this.lanes.active;
    const slot = this.lanes.liveSlot();
    await slot.lock.run(async () => {
      // a cut past the sliding window leaves the lane empty: its next sync evaluates it again
      await cutSequence(slot.sequence, lane.activatedFrom!, this.lanes.rules.cutFloor);
      this.lanes.byKey.delete(lane.key.toString());
      rekeyToBase(lane, this.lanes.baseKey());
      this.lanes.byKey.set(lane.key.toString(), lane);
    });
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.lanes.ensureOpen();
    const rendered = renderConversation(this.services.model, this.services.chatWrapper, conversation);
    this.ensureFits(rendered.tokens.length + 1);
    this.lanes.rememberPrompt(conversation);
    this.catchUp.moveFrontier(rendered.tokens);
    return this.services.work.foreground(() => {
      const queued = now();
      return this.lanes.withActive((lane, sequence) =>
        generateTurn(
          this.services,
          { lane, sequence, contextSize: this.contextSize, plan: this.lanes.planFor(lane, rendered.tokens) },
          conversation,
          rendered,
          options,
          queued,
        ),
      );
    }, this.services.work.opts.afterTurnMs);
  }

  async prefill(conversation: Conversation): Promise<PrefillReport> {
    return this.synced(conversation, async (_sequence, _tokens, prefill) => prefill);
  }

  async clearCache(): Promise<void> {
    this.lanes.ensureOpen();
    await this.services.work.foreground(() =>
      this.lanes.withActive(async (lane, sequence) => {
        await sequence.clearHistory();
        lane.clearLog();
        if (lane.activatedFrom !== undefined) lane.activatedFrom = Infinity;
      }),
    );
  }

  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    return this.synced(conversation, (sequence, tokens) => nextTokenAfter(sequence, tokens));
  }

  anticipate(next: readonly (readonly string[])[], soFar?: HistorySoFar): void {
    this.catchUp.anticipate(next, soFar);
  }

  backgroundWork(): BackgroundWork {
    return this.catchUp.work();
  }

  /**
   * Runs `fn` under the sequence lock with this session's weights set and the prompt (all but its last token)
   * cached.
   */
  private async synced<T>(
    conversation: Conversation,
    fn: (sequence: LlamaContextSequence, tokens: Token[], prefill: PrefillReport) => Promise<T>,
  ): Promise<T> {
    this.lanes.ensureOpen();
    const tokens = this.lanes.render(conversation);
    this.ensureFits(tokens.length);
    this.lanes.rememberPrompt(conversation);
    this.catchUp.moveFrontier(tokens);
    return this.services.work.foreground(() =>
      this.lanes.withActive(async (lane, sequence) => {
        const { reused, evaluated, ms } = await syncLane(this.services, lane, tokens, this.lanes.planFor(lane, tokens));
        return fn(sequence, tokens, { reused, evaluated, ms });
      }),
    );
  }

  promptTokens(conversation: Conversation): number {
    return this.lanes.render(conversation).length;
  }

  async close(): Promise<void> {
    if (this.lanes.isClosed) return;
    this.lanes.markClosed(); // refuses new work at once; a switch under way finishes first, then everything is dropped
    this.services.work.remove(this.catchUp);
    await this.services.work.foreground(() =>
      this.switching.run(async () => {
        try {
          await this.lanes.dropAll();
        } finally {
          this.services.closed(this.id);
        }
      }),
    );
  }

  private ensureFits(tokens: number) {
    if (tokens > this.contextSize) throw new ContextOverflowError(tokens, this.contextSize);
  }
}

/** The lane becomes the session's plain base lane (an activated LoRA's part is gone or never came). */
function rekeyToBase(lane: Lane, base: LaneKey): void {
  lane.key = base;
  lane.versions = [];
  lane.activatedFrom = undefined;
}
