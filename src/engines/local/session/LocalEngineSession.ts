import type { LlamaContextSequence, Token } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion, BackgroundWork, Conversation, EngineSession, GenerateOptions, GenerateResult, HistorySoFar, LaneState, LogProbs, PrefillReport, SwitchReport, WeightSet } from "../../../engine/index.js";
import { aliasesOf, commonPrefixLength, ContextOverflowError, InvalidAdapterSetError, SessionClosedError, UnknownAdapterError } from "../../../engine/index.js";
import { Mutex } from "../../../mutex.js";
import type { BackgroundSource } from "../background/BackgroundScheduler.js";
import type { CacheReplay } from "../cache/DecodeLog.js";
import { Lane, type Slot } from "../cache/Lane.js";
import type { LaneKey } from "../cache/LaneKey.js";
import { renderConversation, settledTokens } from "../chat/render.js";
import { generateTurn } from "./generate.js";
import { extendLane, now, syncLane, weightsLabel, type PrefixPlan, type SyncPlan } from "./laneSync.js";
import { nextTokenAfter } from "./logProbs.js";
import type { EngineServices } from "./EngineServices.js";
import type { SessionRules } from "./SessionRules.js";
import type { SwitchingSession, SwitchOutcome } from "./strategies/index.js";

/** The rendered system prompt and function docs of the conversations this session was last given. */
interface PromptPrefixCache {
  system: string | undefined;
  functions: Conversation["functions"];
  tokens: readonly Token[];
}

/**
 * One conversation on the local engine: its history's KV cache, held in lanes (one per weight set under
 * `reuse`, a single one rebuilt on each switch under `rebuild`: the engine's `SwitchStrategy`), and its
 * active adapter set. Every evaluation holds its lane's context lock and first applies the lane's adapter
 * set, so sessions on different adapters can share a context without ever decoding under each other's weights.
 * While nobody waits on the engine, the session brings the lanes it was told it will need next up to its
 * history (`catchUpStep`, called by the engine's background scheduler).
 */
export class LocalEngineSession implements EngineSession, BackgroundSource {
  private closed = false;
  /** The active lane: live (it has a sequence), but inside an in-place switch. */
  private lane: Lane;
  /** Switches, close and background steps, one at a time: lanes are created, parked and dropped only under it. */
  private readonly switching = new Mutex();
  /** Tokens one lane holds at most (every sequence of the engine has the same size). */
  readonly contextSize: number;
  /** Every lane this session has, by key, the active one included. */
  private readonly lanes = new Map<string, Lane>();
  /** What the switch strategy may see and change of this session. */
  private readonly switchingView: SwitchingSession;
  /** The weight sets (aliases) the session will probably need next, most likely first. */
  private anticipated: readonly (readonly string[])[] = [];
  private readonly background: BackgroundWork = { tokens: 0, batches: 0, ms: 0 };
  private prompt: PromptPrefixCache | undefined;
  /**
   * The last prompt the session was given, but its last token (what a synced lane holds): what background work
   * brings other lanes to. Generated tokens are left out: a turn can re-render otherwise (text that is not valid
   * UTF-8), and once recorded it is in the next prompt. A hint's history so far moves it on (`soFar`).
   */
  private frontier: readonly Token[] = [];
  /** The history so far of the last hint, rendered into `frontier` by the first background step that needs it. */
  private soFar: HistorySoFar | undefined;

  constructor(
    readonly id: number,
    private readonly host: EngineServices,
    private readonly rules: SessionRules,
    first: Lane,
  ) {
    this.lane = first;
    this.lanes.set(first.key.toString(), first);
    this.contextSize = first.slot!.sequence.contextSize;
    host.pool.use(first);
    if (this.activates(first.versions)) first.activatedFrom = Infinity;
    this.switchingView = {
      id,
      host,
      lanes: this.lanes,
      activeLane: () => this.lane,
      activate: (lane) => {
        this.lane = lane;
      },
      cachedTokens: () => this.cachedTokens,
      liveSlot: () => this.liveSlot(),
      planFor: (lane, tokens) => this.planFor(lane, tokens),
      activates: (versions) => this.activates(versions),
      baseKey: () => this.rules.keyOf([]),
    };
    host.work.add(this);
  }

  get activeAdapter(): string | null {
    return weightsLabel(this.lane.versions);
  }

  get activeVersions(): readonly AdapterVersion[] {
    return this.lane.versions;
  }

  get cachedTokens(): number {
    return this.lane.slot?.sequence.nextTokenIndex ?? 0; // no slot only inside an in-place switch
  }

  /** How the active lane's cache was computed: what a reference context must replay to reproduce it exactly. */
  cacheReplay(): CacheReplay {
    return this.lane.replay();
  }

  /**
   * Drops the lanes no switch can reach any more: a lane is reachable while resolving its aliases now gives
   * its key again (a refreshed or removed adapter changes or loses it). Caller holds every context lock.
   */
  async dropUnreachableLanes(): Promise<void> {
    for (const [key, lane] of this.lanes) {
      if (lane === this.lane || this.keyOfCurrent(lane.versions)?.equals(lane.key)) continue;
      await this.host.pool.drop(lane);
      this.lanes.delete(key);
    }
  }

  private keyOfCurrent(versions: readonly AdapterVersion[]): LaneKey | undefined {
    try {
      return this.rules.keyOf(versions.map((v) => this.host.resolve(v.alias)));
    } catch (err) {
      if (err instanceof UnknownAdapterError) return undefined; // an alias left the library
      throw err;
    }
  }

  laneStates(): LaneState[] {
    return [...this.lanes.values()]
      .filter((l) => !l.empty)
      .map((l) => ({ weights: weightsLabel(l.versions) ?? "base", active: l === this.lane, state: l.slot ? "live" : "spilled", tokens: l.slot?.sequence.nextTokenIndex ?? l.spilled!.tokens }));
  }

  async switchWeights(to: WeightSet, conversation: Conversation): Promise<SwitchReport> {
    const aliases = aliasesOf(to);
    this.ensureOpen();
    this.ensureApplicable(aliases.map((a) => this.host.resolve(a))); // refused before anything changes
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.host.work.foreground(() => {
      const queued = now();
      return this.switching.run(async () => {
        this.ensureOpen();
        // resolved and pinned with no await between: a refresh cannot free them before the session holds them
        const to = aliases.map((a) => this.host.resolve(a));
        this.ensureApplicable(to);
        this.host.pin(to);
        try {
          const key = this.rules.keyOf(to);
          const from = this.activeAdapter;
          let result: SwitchOutcome;
          if (key.equals(this.lane.key)) {
            this.lane.versions = to;
            result = { sync: { reused: this.cachedTokens, evaluated: 0, restored: 0, shared: 0, ms: 0 }, queueMs: 0, strategy: "unchanged" };
          } else {
            this.rememberPrompt(conversation);
            result = await this.rules.strategy.switch(this.switchingView, key, to, tokens, queued);
          }
          this.frontier = tokens.slice(0, -1);
          this.soFar = undefined;
          queueMicrotask(() => this.host.versionsReleased());
          const { sync, queueMs, strategy } = result;
          return {
            from,
            to: weightsLabel(to),
            strategy,
            switchMs: Math.max(0, now() - queued - queueMs - sync.ms),
            rebuild: { tokens: sync.evaluated, reused: sync.reused, restored: sync.restored, shared: sync.shared, ms: sync.ms },
            queueMs,
          };
        } finally {
          this.host.unpin(to);
        }
      });
    });
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.ensureOpen();
    const rendered = renderConversation(this.host.model, this.host.chatWrapper, conversation);
    this.ensureFits(rendered.tokens.length + 1);
    this.rememberPrompt(conversation);
    this.frontier = rendered.tokens.slice(0, -1);
    this.soFar = undefined;
    return this.host.work.foreground(() => {
      const queued = now();
      return this.withActiveLane((lane, sequence) => generateTurn(this.host, { lane, sequence, contextSize: this.contextSize, plan: this.planFor(lane, rendered.tokens) }, conversation, rendered, options, queued));
    }, this.host.work.opts.afterTurnMs);
  }

  async prefill(conversation: Conversation): Promise<PrefillReport> {
    return this.synced(conversation, async (_sequence, _tokens, prefill) => prefill);
  }

  async clearCache(): Promise<void> {
    this.ensureOpen();
    await this.host.work.foreground(() =>
      this.withActiveLane(async (lane, sequence) => {
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
    this.anticipated = next.map((set) => [...set]);
    this.soFar = soFar;
    if (next.length) this.host.work.wake();
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
      const settled = settledTokens(this.host.model, this.host.chatWrapper, soFar);
      if (settled.length <= this.contextSize) this.frontier = settled;
    } catch (err) {
      this.host.work.opts.logger.debug({ err: (err as Error).message }, "history so far not rendered; background work stops at the last prompt");
    }
  }

  backgroundWork(): BackgroundWork {
    return { ...this.background };
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
    if (this.closed || !this.anticipated.length || this.switching.depth > 0) return false;
    return this.switching.run(async () => {
      if (this.closed || this.host.work.mustYield) return false;
      this.settleFrontier();
      const active = this.lane;
      const frontier = this.frontier;
      if (!frontier.length) return false;
      for (const aliases of this.anticipated) {
        const versions = this.resolveAll(aliases);
        if (!versions || this.activates(versions)) continue;
        const key = this.rules.keyOf(versions);
        // the active lane, or the base lane while an activated LoRA runs on it
        if (key.equals(active.key) || (versions.length === 0 && active.activatedFrom !== undefined)) continue;
        let lane = this.lanes.get(key.toString());
        if (lane?.empty) this.lanes.delete(key.toString());
        else if (lane && !lane.slot) continue;
        if (lane && !lane.empty && commonPrefixLength(lane.tokens, frontier) === frontier.length) continue;
        if (!lane || lane.empty) {
          const free = this.host.pool.acquireFree();
          if (!free) continue;
          lane = new Lane(this.id, key, versions);
          lane.speculative = true;
          lane.attach(free);
          this.lanes.set(key.toString(), lane);
          this.host.pool.park(lane);
          this.host.work.totals.lanesStarted++;
        }
        return this.extendInBackground(lane, active, frontier);
      }
      return false;
    });
  }

  /** One decode extending `lane` towards `frontier` under its context's lock, unless a caller arrived meanwhile. */
  private async extendInBackground(lane: Lane, active: Lane, frontier: readonly Token[]): Promise<boolean> {
    const slot = lane.slot!;
    const work = this.host.work;
    return slot.context.lock.runBackground(async () => {
      if (work.mustYield) {
        work.totals.yields++;
        return false;
      }
      if (lane.slot !== slot || this.lanes.get(lane.key.toString()) !== lane) return false;
      const started = now();
      const decoded = await extendLane(this.host, lane, this.rules.backgroundWeights(lane, active), frontier, work.batchTokens(), this.prefixPlan(lane, undefined));
      if (decoded === undefined) return false;
      const ms = now() - started;
      work.recordBatch(decoded, ms);
      this.background.tokens += decoded;
      this.background.batches++;
      this.background.ms += ms;
      return true;
    });
  }

  private resolveAll(aliases: readonly string[]): AdapterVersion[] | undefined {
    try {
      return aliases.map((a) => this.host.resolve(a));
    } catch (err) {
      if (err instanceof UnknownAdapterError) return undefined; // a hint may name an adapter that left the library
      throw err;
    }
  }

  /** Whether `versions` is an activated LoRA (which applies alone). */
  private activates(versions: readonly AdapterVersion[]): boolean {
    return versions.length === 1 && this.host.invocationOf(versions[0]!) !== undefined;
  }

  /** An activated LoRA applies alone: with other adapters its invocation point would have no meaning. */
  private ensureApplicable(versions: readonly AdapterVersion[]): void {
    if (versions.length > 1 && versions.some((v) => this.host.invocationOf(v))) {
      throw new InvalidAdapterSetError(
        versions.map((v) => v.alias),
        "an activated LoRA (one with adapter.alora.invocation_tokens) applies alone, from its invocation point on",
      );
    }
  }

  /** How a sync brings `lane` to `tokens`: its activated LoRA's invocation point, and the shared prefix an empty cache may start from. */
  private planFor(lane: Lane, tokens: readonly Token[]): SyncPlan {
    const invocation = this.activates(lane.versions) ? this.host.invocationOf(lane.versions[0]!) : undefined;
    const activatedFrom = invocation ? (this.rules.invocationOf(tokens, invocation) ?? Infinity) : undefined;
    return { activatedFrom, prefix: this.prefixPlan(lane, activatedFrom) };
  }

  /** The shared prompt prefix for `lane`: computed under the base before an activated LoRA's invocation point, else under the lane's weights. */
  private prefixPlan(lane: Lane, activatedFrom: number | undefined): PrefixPlan | undefined {
    if (!this.host.prefixes || !this.prompt?.tokens.length) return undefined;
    const weights = activatedFrom === undefined ? lane.key : this.rules.keyOf([]);
    return { tokens: this.prompt.tokens, scope: this.rules.promptScope, weights, keyOf: this.rules.prefixKeyOf };
  }

  /**
   * The conversation's shareable prefix: the tokens its system turn (with the function docs, which chat
   * templates render into it) shares with the whole prompt. Rendered again only when the system text or the
   * functions change.
   */
  private rememberPrompt(conversation: Conversation): void {
    if (!this.host.prefixes) return;
    const first = conversation.turns[0];
    const system = first?.role === "system" ? first.text : undefined;
    if (this.prompt && this.prompt.system === system && this.prompt.functions === conversation.functions) return;
    const whole = this.render(conversation);
    const head = this.render({ turns: first?.role === "system" ? [first] : [], functions: conversation.functions });
    this.prompt = { system, functions: conversation.functions, tokens: whole.slice(0, commonPrefixLength(whole, head)) };
  }

  /** Runs `fn` under the context lock with this session's weights applied and the prompt (all but its last token) cached. */
  private async synced<T>(conversation: Conversation, fn: (sequence: LlamaContextSequence, tokens: Token[], prefill: PrefillReport) => Promise<T>): Promise<T> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    this.rememberPrompt(conversation);
    this.frontier = tokens.slice(0, -1);
    this.soFar = undefined;
    return this.host.work.foreground(() =>
      this.withActiveLane(async (lane, sequence) => {
        const { reused, evaluated, ms } = await syncLane(this.host, lane, tokens, this.planFor(lane, tokens));
        return fn(sequence, tokens, { reused, evaluated, ms });
      }),
    );
  }

  /** Runs `fn` on the active lane under its context lock (re-read under the lock: a switch may have moved it). */
  private async withActiveLane<T>(fn: (lane: Lane, sequence: LlamaContextSequence) => Promise<T>): Promise<T> {
    for (;;) {
      const lane = this.lane;
      const slot = this.liveSlot();
      let ran = false;
      const result = await slot.context.lock.run(async () => {
        if (this.lane !== lane || lane.slot !== slot) return undefined;
        ran = true;
        return fn(lane, slot.sequence);
      });
      if (ran) return result as T;
      this.ensureOpen();
    }
  }

  promptTokens(conversation: Conversation): number {
    return this.render(conversation).length;
  }

  private render(conversation: Conversation): Token[] {
    return renderConversation(this.host.model, this.host.chatWrapper, conversation).tokens;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true; // refuses new work at once; a switch under way finishes first, then everything is dropped
    this.host.work.remove(this);
    await this.host.work.foreground(() =>
      this.switching.run(async () => {
        try {
          for (const lane of this.lanes.values()) {
            const slot = lane.slot;
            if (slot) await slot.context.lock.run(() => this.host.pool.drop(lane));
            else await this.host.pool.drop(lane);
          }
        } finally {
          this.host.closed(this.id);
        }
      }),
    );
  }

  private liveSlot(): Slot {
    const slot = this.lane.slot;
    if (!slot) throw new SessionClosedError();
    return slot;
  }

  private ensureOpen() {
    if (this.closed) throw new SessionClosedError();
  }

  private ensureFits(tokens: number) {
    if (tokens > this.contextSize) throw new ContextOverflowError(tokens, this.contextSize);
  }
}
