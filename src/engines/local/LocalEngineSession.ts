import type { LlamaContextSequence, Token } from "node-llama-cpp";
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
  WeightRequest,
} from "../../engine/index.js";
import { aliasesOf, ContextOverflowError } from "../../engine/index.js";
import { Mutex } from "../../mutex.js";
import { renderConversation } from "../../llamaCpp/render.js";
import type { SessionRules } from "./deciding/SessionRules.js";
import type { SwitchPlan } from "./deciding/SwitchStrategy.js";
import { LaneSwitch } from "./kv/LaneSwitch.js";
import { generateTurn } from "./generateTurn.js";
import { CatchUp } from "./kv/CatchUp.js";
import type { CacheReplay } from "./kv/DecodeLog.js";
import type { EngineParts } from "./kv/EngineParts.js";
import type { Lane } from "./kv/Lane.js";
import { now, syncLane, type Synced } from "./kv/laneSync.js";
import { SessionLanes } from "./kv/SessionLanes.js";
import { nextTokenAfter } from "./tokenLogProbs.js";

/** What a session tells the engine that owns it (LocalEngine). */
export interface SessionOwner {
  /** The session stopped using some versions (a switch or close): the engine may free unused ones. */
  versionsReleased(): void;
  /** The session with this id closed and gave back everything it held. */
  sessionClosed(sessionId: number): void;
}

/**
 * One conversation on the local engine: its history's KV cache, held in lanes (`SessionLanes`: one per weight
 * set under `reuse`, a single one rebuilt on each switch under `rebuild`), and its active weights. The weight
 * switch is carried out here: the engine's `SwitchStrategy` decides what happens to the caches, and this session
 * applies the decision. Every evaluation holds its lane's sequence lock and sets the lane's decode weights (laneSync);
 * each decode then waits for a round of those weights in its context (`DecodeRounds`), so sessions under the same
 * weights decode in one batch and sessions on different adapters share a context without ever decoding under each
 * other's weights. Generation is in generateTurn.ts, evaluation ahead of time in `CatchUp`.
 */
export class LocalEngineSession implements EngineSession {
  /** Switches, close and background steps, one at a time: lanes are created, parked and dropped only under it. */
  private readonly switching = new Mutex();
  /** Tokens one lane holds at most (every sequence of the engine has the same size). */
  readonly contextSize: number;
  private readonly lanes: SessionLanes;
  /** Carries out a switch plan on the lanes. */
  private readonly laneSwitch: LaneSwitch;
  private readonly catchUp: CatchUp;

  constructor(
    readonly id: number,
    private readonly parts: EngineParts,
    private readonly owner: SessionOwner,
    rules: SessionRules,
    first: Lane,
  ) {
    this.contextSize = first.slot!.sequence.contextSize;
    this.lanes = new SessionLanes(id, parts, rules, first);
    this.laneSwitch = new LaneSwitch(id, parts, this.lanes);
    this.catchUp = new CatchUp(parts, this.lanes, this.switching, this.contextSize);
    parts.scheduler.add(this.catchUp);
  }

  get activeAdapter(): string | null {
    return this.lanes.active.weights.label;
  }

  get activeVersions(): readonly AdapterVersion[] {
    return this.lanes.active.weights.versions;
  }

  get cachedTokens(): number {
    return this.lanes.cachedTokens;
  }

  /** How the active lane's cache was computed: what a reference context must replay to reproduce it exactly. */
  cacheReplay(): CacheReplay {
    return this.lanes.cacheReplay();
  }

  /** Drops the lanes no switch can reach any more (their weights were refreshed or removed). */
  async dropUnreachableLanes(): Promise<void> {
    // between switches: a switch (or a step ahead of time) never finds a lane half dropped
    const release = await this.switching.acquire();
    try {
      await this.lanes.dropUnreachable();
    } finally {
      release();
    }
  }

  laneStates(): LaneState[] {
    return this.lanes.laneStates();
  }

  /**
   * The switch: resolves the request to its versions (pinned until done), names them (`WeightSet`), asks the
   * strategy for a plan and carries it out under the session's switch lock.
   */
  async switchWeights(request: WeightRequest, conversation: Conversation): Promise<SwitchReport> {
    const aliases = aliasesOf(request);
    const { adapters, scheduler } = this.parts;
    this.lanes.ensureOpen();
    this.lanes.ensureApplicable(aliases.map((a) => adapters.resolve(a))); // refused before anything changes
    const tokens = this.lanes.render(conversation);
    this.ensureFits(tokens.length);
    scheduler.beginForeground();
    try {
      const queued = now();
      const release = await this.switching.acquire();
      try {
        return await this.switchHeld(aliases, conversation, tokens, queued);
      } finally {
        release();
      }
    } finally {
      scheduler.endForeground();
    }
  }

  /** The switch, under the session's switch lock. */
  private async switchHeld(
    aliases: readonly string[],
    conversation: Conversation,
    tokens: Token[],
    queued: number,
  ): Promise<SwitchReport> {
    const { adapters } = this.parts;
    this.lanes.ensureOpen();
    // resolved and pinned with no await between: a refresh cannot free them before the session holds them
    const versions = aliases.map((a) => adapters.resolve(a));
    this.lanes.ensureApplicable(versions);
    adapters.pin(versions);
    try {
      const to = this.lanes.rules.weightsOf(versions);
      const from = this.activeAdapter;
      const same = to.equals(this.lanes.active.weights);
      if (!same) this.lanes.rememberPrompt(conversation);
      const plan: SwitchPlan = same
        ? { kind: "unchanged" }
        : this.lanes.rules.strategy.plan({
            to,
            activating: this.lanes.activates(versions),
            base: this.lanes.baseWeights(),
          });
      const { sync, queueMs, strategy } = await this.laneSwitch.carryOut(plan, to, tokens, queued);
      this.catchUp.moveFrontier(tokens);
      queueMicrotask(() => this.owner.versionsReleased());
      return {
        from,
        to: to.label,
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
      if (adapters.unpin(versions)) this.owner.versionsReleased();
    }
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.lanes.ensureOpen();
    const rendered = renderConversation(this.parts.model, this.parts.chatWrapper, conversation);
    this.ensureFits(rendered.tokens.length + 1);
    this.lanes.rememberPrompt(conversation);
    this.catchUp.moveFrontier(rendered.tokens);
    const { scheduler } = this.parts;
    scheduler.beginForeground();
    try {
      const queued = now();
      const { lane, sequence, release } = await this.lanes.lockActive();
      try {
        const target = {
          lane,
          sequence,
          contextSize: this.contextSize,
          plan: this.lanes.planFor(lane, rendered.tokens),
        };
        return await generateTurn(this.parts, target, conversation, rendered, options, queued);
      } finally {
        release();
      }
    } finally {
      scheduler.endForeground(scheduler.opts.afterTurnMs);
    }
  }

  async prefill(conversation: Conversation): Promise<PrefillReport> {
    const { reused, evaluated, ms } = await this.synced(conversation, async () => undefined);
    return { reused, evaluated, ms };
  }

  async clearCache(): Promise<void> {
    this.lanes.ensureOpen();
    this.parts.scheduler.beginForeground();
    try {
      const { lane, sequence, release } = await this.lanes.lockActive();
      try {
        await sequence.clearHistory();
        lane.clearLog();
        if (lane.activatedFrom !== undefined) lane.activatedFrom = Infinity;
      } finally {
        release();
      }
    } finally {
      this.parts.scheduler.endForeground();
    }
  }

  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    return (await this.synced(conversation, (sequence, tokens) => nextTokenAfter(sequence, tokens))).result;
  }

  anticipate(next: readonly (readonly string[])[], soFar?: HistorySoFar): void {
    this.catchUp.anticipate(next, soFar);
  }

  backgroundWork(): BackgroundWork {
    return this.catchUp.work();
  }

  /**
   * Brings the active lane to the prompt (all but its last token) under its sequence lock with this session's weights
   * set, then runs `read` on it before the lock is released.
   */
  private async synced<T>(
    conversation: Conversation,
    read: (sequence: LlamaContextSequence, tokens: Token[]) => Promise<T>,
  ): Promise<Synced & { result: T }> {
    this.lanes.ensureOpen();
    const tokens = this.lanes.render(conversation);
    this.ensureFits(tokens.length);
    this.lanes.rememberPrompt(conversation);
    this.catchUp.moveFrontier(tokens);
    this.parts.scheduler.beginForeground();
    try {
      const { lane, sequence, release } = await this.lanes.lockActive();
      try {
        const synced = await syncLane(this.parts, lane, tokens, this.lanes.planFor(lane, tokens));
        return { ...synced, result: await read(sequence, tokens) };
      } finally {
        release();
      }
    } finally {
      this.parts.scheduler.endForeground();
    }
  }

  promptTokens(conversation: Conversation): number {
    return this.lanes.render(conversation).length;
  }

  async close(): Promise<void> {
    if (this.lanes.isClosed) return;
    this.lanes.markClosed(); // refuses new work at once; a switch under way finishes first, then everything is dropped
    this.parts.scheduler.remove(this.catchUp);
    this.parts.scheduler.beginForeground();
    try {
      const release = await this.switching.acquire();
      try {
        await this.lanes.dropAll();
      } finally {
        try {
          this.owner.sessionClosed(this.id);
        } finally {
          release();
        }
      }
    } finally {
      this.parts.scheduler.endForeground();
    }
  }

  private ensureFits(tokens: number) {
    if (tokens > this.contextSize) throw new ContextOverflowError(tokens, this.contextSize);
  }
}
