import type { LlamaContextSequence, Token } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion, Conversation, EngineSession, GenerateOptions, GenerateResult, LaneState, LogProbs, PrefillReport, SwitchReport } from "../../src/engine/index.js";
import { ContextOverflowError, SessionClosedError, UnknownAdapterError } from "../../src/engine/index.js";
import { Mutex } from "../../src/mutex.js";
import type { CacheReplay } from "../cache/DecodeLog.js";
import type { Lane, Slot } from "../cache/Lane.js";
import type { LaneKey } from "../cache/LaneKey.js";
import { renderConversation } from "../chat/render.js";
import { generateTurn } from "./generate.js";
import { applyWeights, now, syncPrefix, weightsLabel } from "./laneSync.js";
import { nextTokenAfter } from "./logProbs.js";
import type { LaneKeyOf, SessionHost } from "./SessionHost.js";
import type { SwitchingSession, SwitchOutcome, SwitchStrategy } from "./strategies/index.js";

/**
 * One conversation on the local engine: its history's KV cache, held in lanes (one per weight set under
 * `reuse`, a single one rebuilt on each switch under `rebuild`: the engine's `SwitchStrategy`), and its
 * active adapter set. Every evaluation holds its lane's context lock and first applies the lane's adapter
 * set, so sessions on different adapters can share a context without ever decoding under each other's weights.
 */
export class LocalEngineSession implements EngineSession {
  private closed = false;
  /** The active lane: live (it has a sequence), but inside an in-place switch. */
  private lane: Lane;
  /** Switches and close, one at a time: lanes are created, parked and dropped only here. */
  private readonly switching = new Mutex();
  /** Tokens one lane holds at most (every sequence of the engine has the same size). */
  readonly contextSize: number;
  /** Every lane this session has, by key, the active one included. */
  private readonly lanes = new Map<string, Lane>();
  /** What the switch strategy may see and change of this session. */
  private readonly switchingView: SwitchingSession;

  constructor(
    readonly id: number,
    private readonly host: SessionHost,
    private readonly strategy: SwitchStrategy,
    private readonly keyOf: LaneKeyOf,
    first: Lane,
  ) {
    this.lane = first;
    this.lanes.set(first.key.toString(), first);
    this.contextSize = first.slot!.sequence.contextSize;
    host.pool.use(first);
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
    };
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
      return this.keyOf(versions.map((v) => this.host.resolve(v.alias)));
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

  async switchAdapter(to: string | null, conversation: Conversation): Promise<SwitchReport> {
    return this.switchAdapters(to === null ? [] : [to], conversation);
  }

  async switchAdapters(aliases: readonly string[], conversation: Conversation): Promise<SwitchReport> {
    this.ensureOpen();
    for (const a of aliases) this.host.resolve(a); // an unknown alias is refused before anything changes
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    const queued = now();
    return this.switching.run(async () => {
      this.ensureOpen();
      // resolved and pinned with no await between: a refresh cannot free them before the session holds them
      const to = aliases.map((a) => this.host.resolve(a));
      this.host.pin(to);
      try {
        const key = this.keyOf(to);
        const from = this.activeAdapter;
        let result: SwitchOutcome;
        if (key.equals(this.lane.key)) {
          this.lane.versions = to;
          result = { sync: { reused: this.cachedTokens, evaluated: 0, restored: 0, ms: 0 }, queueMs: 0, strategy: "unchanged" };
        } else {
          result = await this.strategy.switch(this.switchingView, key, to, tokens, queued);
        }
        queueMicrotask(() => this.host.versionsReleased());
        const { sync, queueMs, strategy } = result;
        return {
          from,
          to: weightsLabel(to),
          strategy,
          switchMs: Math.max(0, now() - queued - queueMs - sync.ms),
          rebuild: { tokens: sync.evaluated, reused: sync.reused, restored: sync.restored, ms: sync.ms },
          queueMs,
        };
      } finally {
        this.host.unpin(to);
      }
    });
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.ensureOpen();
    const rendered = renderConversation(this.host.model, this.host.chatWrapper, conversation);
    this.ensureFits(rendered.tokens.length + 1);
    const queued = now();
    return this.withActiveLane((lane, sequence) => generateTurn(this.host, { lane, sequence, contextSize: this.contextSize }, conversation, rendered, options, queued));
  }

  async prefill(conversation: Conversation): Promise<PrefillReport> {
    return this.synced(conversation, async (_sequence, _tokens, prefill) => prefill);
  }

  async clearCache(): Promise<void> {
    this.ensureOpen();
    await this.withActiveLane(async (lane, sequence) => {
      await sequence.clearHistory();
      lane.clearLog();
    });
  }

  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    return this.synced(conversation, (sequence, tokens) => nextTokenAfter(sequence, tokens));
  }

  /** Runs `fn` under the context lock with this session's weights applied and the prompt (all but its last token) cached. */
  private async synced<T>(conversation: Conversation, fn: (sequence: LlamaContextSequence, tokens: Token[], prefill: PrefillReport) => Promise<T>): Promise<T> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.withActiveLane(async (lane, sequence) => {
      await applyWeights(this.host, lane);
      return fn(sequence, tokens, await syncPrefix(sequence, tokens));
    });
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
    await this.switching.run(async () => {
      try {
        for (const lane of this.lanes.values()) {
          const slot = lane.slot;
          if (slot) await slot.context.lock.run(() => this.host.pool.drop(lane));
          else await this.host.pool.drop(lane);
        }
      } finally {
        this.host.closed(this.id);
      }
    });
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
