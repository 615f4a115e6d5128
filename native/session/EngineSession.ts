import { LlamaChat, LlamaText, TokenBias, type ChatWrapper, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { renderConversation, toChatModelFunctions } from "../chat/render.js";
import { generationBias } from "../chat/bias.js";
import { ResidentAdapters } from "../adapters/ResidentAdapters.js";
import type { CacheReplay } from "../cache/DecodeLog.js";
import { Mutex } from "../context/Mutex.js";
import { Lane, type Slot } from "../cache/Lane.js";
import type { LanePool } from "../cache/LanePool.js";
import { ContextOverflowError, EngineCapacityError, SessionClosedError, UnknownAdapterError } from "../../src/engine/errors.js";
import type { AdapterWeight } from "../llama/internals.js";
import type {
  CacheStrategy,
  Conversation,
  FinishReason,
  GenerateOptions,
  GenerateResult,
  GeneratedCall,
  SwitchReport,
  TokenLogprob,
} from "../../src/engine/index.js";

/** What a session needs from its engine. */
export interface SessionHost {
  readonly model: LlamaModel;
  readonly chatWrapper: ChatWrapper;
  readonly pool: LanePool;
  /** The current version of an alias; throws UnknownAdapterError for an alias not in the library. */
  resolve(alias: string): string;
  weightOf(version: string): AdapterWeight;
  /** Keeps versions from being freed while a switch to them is under way. */
  pin(versions: readonly string[]): void;
  unpin(versions: readonly string[]): void;
  /** The session stopped using some versions (switch or close): the engine may free unused ones. */
  versionsReleased(): void;
  closed(session: EngineSession): void;
}

/**
 * How the session treats its KV cache on a switch: `rebuild` clears it and re-prefills the history under
 * the new weights; `reuse` keeps one lane per weight set and, returning to one, evaluates only what it
 * has not seen. Only tests may choose "keep-stale".
 */
export type SwitchCachePolicy = CacheStrategy | "keep-stale";

/** Names a weight set exactly; tests swap in a careless one to prove the key matters. */
export type LaneKeyOf = (versions: readonly string[]) => string;

const now = () => performance.now();

/** Tokens before a steered turn's limit from which its call's arguments are closed (the rest of the call fits in them). */
const CLOSING_MARGIN = 48;

/** null for the base, else the adapters' aliases joined with "+" (read from the version ids: valid even once a version is freed). */
const label = (versions: readonly string[]): string | null => (versions.length ? versions.map(ResidentAdapters.aliasOf).join("+") : null);

/** Next-token log-probs, by token id. */
export type LogProbs = Map<Token, number>;

interface Synced {
  reused: number;
  evaluated: number;
  restored: number;
  ms: number;
}

/**
 * One conversation on the engine: its history's KV cache, held in lanes (one per weight set under
 * `reuse`, a single one rebuilt on each switch under `rebuild`), and its active adapter set. Every
 * evaluation holds its lane's context lock and first applies the lane's adapter set, so sessions on
 * different adapters can share a context without ever decoding under each other's weights.
 */
export class EngineSession {
  private closed = false;
  /** The active lane: live (it has a sequence), but inside an in-place switch. */
  private lane: Lane;
  /** Switches and close, one at a time: lanes are created, parked and dropped only here. */
  private readonly switching = new Mutex();
  /** Tokens one lane holds at most (every sequence of the engine has the same size). */
  readonly contextSize: number;
  /** Under `reuse`: every lane this session has, by key, the active one included. */
  private readonly lanes = new Map<string, Lane>();

  constructor(
    readonly id: number,
    private readonly host: SessionHost,
    private readonly cachePolicy: SwitchCachePolicy,
    private readonly keyOf: LaneKeyOf,
    first: Lane,
  ) {
    this.lane = first;
    this.lanes.set(first.key, first);
    this.contextSize = first.slot!.sequence.contextSize;
    host.pool.use(first);
  }

  /** null for the base, the alias for one adapter, "a+b" for several applied together. */
  get activeAdapter(): string | null {
    return label(this.lane.versions);
  }

  /** The exact adapter versions in use: a session keeps the version it loaded even after its alias is refreshed. */
  get activeVersions(): readonly string[] {
    return this.lane.versions;
  }

  /** Tokens whose KV the active lane holds now. */
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
      if (lane === this.lane || key === this.keyOfCurrent(lane.versions)) continue;
      await this.host.pool.drop(lane);
      this.lanes.delete(key);
    }
  }

  private keyOfCurrent(versions: readonly string[]): string | undefined {
    try {
      return this.keyOf(versions.map((v) => this.host.resolve(ResidentAdapters.aliasOf(v))));
    } catch (err) {
      if (err instanceof UnknownAdapterError) return undefined; // an alias left the library
      throw err;
    }
  }

  /** This session's KV lanes: the active one, idle live ones, spilled ones; `weights` is "base" or the adapters' aliases. */
  laneStates(): { weights: string; active: boolean; state: "live" | "spilled"; tokens: number }[] {
    return [...this.lanes.values()]
      .filter((l) => !l.empty)
      .map((l) => ({ weights: label(l.versions) ?? "base", active: l === this.lane, state: l.slot ? "live" : "spilled", tokens: l.slot?.sequence.nextTokenIndex ?? l.spilled!.tokens }));
  }

  /**
   * Makes `to` (an alias, or null for the base) the active adapter, with a KV cache correct for the new
   * weights over the whole history. Validates everything first: a refused switch changes nothing.
   */
  async switchAdapter(to: string | null, conversation: Conversation): Promise<SwitchReport> {
    return this.switchAdapters(to === null ? [] : [to], conversation);
  }

  /** As switchAdapter, for a set of adapters applied together (none = the base). */
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
        let result: { sync: Synced; queueMs: number; strategy: SwitchReport["strategy"] };
        if (key === this.lane.key || this.cachePolicy === "keep-stale") {
          this.lane.versions = to; // keep-stale: the bug the rebuild exists to prevent
          this.lane.key = key;
          result = { sync: { reused: this.cachedTokens, evaluated: 0, restored: 0, ms: 0 }, queueMs: 0, strategy: "unchanged" };
        } else if (this.cachePolicy === "reuse") {
          result = { ...(await this.switchLane(key, to, tokens, queued)), strategy: "reuse" };
        } else {
          result = { ...(await this.rebuildInPlace(key, to, tokens, queued)), strategy: "rebuild" };
        }
        queueMicrotask(() => this.host.versionsReleased());
        const { sync, queueMs, strategy } = result;
        return {
          from,
          to: label(to),
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

  /** `rebuild`: the one lane takes the new weights; none of its cached keys/values may be reused. */
  private async rebuildInPlace(key: string, to: readonly string[], tokens: Token[], queued: number): Promise<{ sync: Synced; queueMs: number }> {
    const lane = this.lane;
    const slot = this.liveSlot();
    return slot.context.lock.run(async () => {
      const queueMs = now() - queued;
      const before = { key: lane.key, versions: lane.versions };
      lane.key = key;
      lane.versions = to;
      try {
        return { sync: await this.rebuild(lane, tokens), queueMs };
      } catch (err) {
        lane.key = before.key;
        lane.versions = before.versions;
        await slot.sequence.clearHistory();
        lane.clearLog();
        throw err;
      }
    });
  }

  /**
   * `reuse`: continue this session's lane for the new weights if it has one (live, or spilled to disk),
   * evaluating only the tokens appended since; else start one. The previous lane stays behind, idle, for
   * the next return. When every sequence is taken by active lanes, the previous lane is spilled and gives
   * its sequence to the new one.
   */
  private async switchLane(key: string, to: readonly string[], tokens: Token[], queued: number): Promise<{ sync: Synced; queueMs: number }> {
    const previous = this.lane;
    for (;;) {
      let target = this.lanes.get(key);
      if (target?.empty) this.lanes.delete(key);
      if (!target || target.empty) target = new Lane(this.id, key, to);
      const lane = target;
      const live = lane.slot;
      const fresh = live ? undefined : await this.host.pool.acquire().catch((err) => (err instanceof EngineCapacityError ? undefined : Promise.reject(err)));
      const slot = live ?? fresh ?? this.liveSlot();
      const result = await slot.context.lock.run(async () => {
        const queueMs = now() - queued;
        if (live && lane.slot !== live) return undefined; // evicted while we waited for the lock: go round again
        try {
          if (fresh) lane.attach(fresh);
          else if (!live) {
            // in place: the previous lane's cache is saved (or dropped) and its sequence emptied for this one
            const taken = (await this.host.pool.takeSequence(previous))!;
            lane.attach(taken);
            await taken.sequence.clearHistory();
          }
          this.host.pool.use(lane);
          lane.versions = to; // equal keys name equal versions
          return { sync: await this.continueLane(lane, tokens), queueMs };
        } catch (err) {
          await this.abandon(lane, previous);
          throw err;
        }
      });
      if (!result) continue;
      this.lanes.set(key, lane);
      this.lane = lane;
      this.host.pool.park(previous);
      if (previous.empty) this.lanes.delete(previous.key);
      return result;
    }
  }

  /** Brings a lane to the prompt: restores its spilled state first if it has one, else builds on what it holds. */
  private async continueLane(lane: Lane, tokens: Token[]): Promise<Synced> {
    const started = now();
    if (!(await this.host.pool.restore(lane))) return this.sync(lane, tokens);
    const restored = lane.slot!.sequence.nextTokenIndex;
    const sync = await this.sync(lane, tokens);
    return { ...sync, restored, ms: now() - started };
  }

  /**
   * A failed switch: the new lane gives its sequence back. Taken from the previous lane (in place), it
   * returns to it emptied, and the previous lane's spilled state, if any, is restored into it.
   */
  private async abandon(lane: Lane, previous: Lane): Promise<void> {
    const slot = lane.detach();
    if (!slot) return;
    if (previous.slot) return slot.sequence.dispose();
    previous.attach(slot);
    await slot.sequence.clearHistory();
    await this.continueLane(previous, []).catch(() => undefined); // an empty cache is still a correct one
  }

  /** Clears the lane and evaluates the prompt under its weights from the start. Caller holds the lock. */
  private async rebuild(lane: Lane, tokens: Token[]): Promise<Synced> {
    await lane.slot!.sequence.clearHistory();
    lane.clearLog();
    return this.sync(lane, tokens);
  }

  /** Applies the lane's weights and evaluates what its cache lacks of the prompt. Caller holds the lock. */
  private async sync(lane: Lane, tokens: readonly Token[]): Promise<Synced> {
    await this.applyWeights(lane);
    if (!tokens.length) return { reused: lane.slot!.sequence.nextTokenIndex, evaluated: 0, restored: 0, ms: 0 };
    const { reused, evaluated, ms } = await syncPrefix(lane.slot!.sequence, tokens);
    return { reused, evaluated, restored: 0, ms };
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.ensureOpen();
    const { history, wrapper, tokens } = renderConversation(this.host.model, this.host.chatWrapper, conversation);
    this.ensureFits(tokens.length + 1);
    // Never let node-llama-cpp shift the context (it would silently drop the start of the prompt).
    const maxTokens = Math.min(options.maxTokens ?? 256, this.contextSize - tokens.length);
    const queued = now();
    return this.withActiveLane(async (lane, sequence) => {
      const started = now();
      const queueMs = started - queued;
      // the caller gave up while this call waited for the context: no weights to apply, nothing to evaluate for it
      if (options.signal?.aborted) {
        const tokenCounts = { prompt: tokens.length, cached: 0, evaluated: 0, generated: 0 };
        const timings = { queueMs, adapterSetMs: 0, prefillMs: 0, decodeMs: 0, logprobsMs: 0, totalMs: 0 };
        return { text: "", calls: [], finishReason: "cancelled" as const, adapter: label(lane.versions), tokens: tokenCounts, timings, contextRemaining: this.contextSize - tokens.length };
      }
      const adapterSetMs = await this.timed(() => this.applyWeights(lane));
      const prefill = await syncPrefix(sequence, tokens);
      const decodeStart = now();
      const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: wrapper, autoDisposeSequence: false });
      const steerTokens = options.steerToolCall ? this.steeringTokens(options.steerToolCall.name) : undefined;
      const steering = steerTokens && { tokens: steerTokens, sequence, promptLength: tokens.length, closeAfter: Math.max(steerTokens.length, maxTokens - CLOSING_MARGIN), closers: this.closerTokens() };
      // node-llama-cpp does not count a function call's prefix against maxTokens: the turn's own count stops it
      const limit = new AbortController();
      let response;
      let generated = 0;
      try {
        response = await chat.generateResponse(history, {
          functions: toChatModelFunctions(conversation.functions, options.callable),
          maxTokens,
          temperature: options.temperature ?? 0,
          seed: options.seed,
          topK: options.topK,
          topP: options.topP,
          tokenBias: limited(this.host.model, generationBias(this.host.model, options.tokenBias, steering), () => sequence.contextTokens.length - tokens.length >= maxTokens - 1, () => limit.abort()),
          signal: options.signal ? AbortSignal.any([options.signal, limit.signal]) : limit.signal,
          stopOnAbortSignal: true,
          onToken: options.onToken && ((chunk) => options.onToken!((generated += chunk.length))),
          onTextChunk: options.onText,
          customStopTriggers: options.stop?.length ? options.stop : undefined,
          maxParallelFunctionCalls: 1,
        });
      } catch (err) {
        // the turn's own limit can land where node-llama-cpp throws on an abort rather than returning
        if (!limit.signal.aborted || options.signal?.aborted) throw err;
      } finally {
        chat.dispose({ disposeSequence: false });
      }
      const decodeMs = now() - decodeStart;
      const generatedTokens = sequence.contextTokens.slice(tokens.length);
      const logprobsStart = now();
      const logprobs = options.topLogprobs ? await this.teacherForcedLogprobs(sequence, tokens, generatedTokens, options.topLogprobs) : undefined;
      const logprobsMs = options.topLogprobs ? now() - logprobsStart : 0;
      const calls: GeneratedCall[] = (response?.functionCalls ?? []).map((c) => ({ name: c.functionName, arguments: c.params, raw: c.raw }));
      return {
        text: response?.response ?? this.host.model.detokenize(generatedTokens),
        calls,
        finishReason: limit.signal.aborted && !options.signal?.aborted ? "length" : finishReason(response!.metadata.stopReason, calls.length),
        adapter: label(lane.versions),
        tokens: {
          prompt: tokens.length,
          cached: prefill.reused,
          evaluated: tokens.length - prefill.reused,
          generated: generatedTokens.length,
        },
        contextRemaining: this.contextSize - tokens.length - generatedTokens.length,
        timings: { queueMs, adapterSetMs, prefillMs: prefill.ms, decodeMs, logprobsMs, totalMs: now() - started },
        ...(logprobs ? { logprobs } : {}),
      };
    });
  }

  /** Evaluates what the cache lacks of the conversation's prompt under this session's weights (a warm-up). */
  async prefill(conversation: Conversation): Promise<{ reused: number; evaluated: number; ms: number }> {
    return this.synced(conversation, async (_sequence, _tokens, prefill) => prefill);
  }

  /** Drops the active lane's cached KV; the next call re-evaluates the prompt from the start. */
  async clearCache(): Promise<void> {
    this.ensureOpen();
    await this.withActiveLane(async (lane, sequence) => {
      await sequence.clearHistory();
      lane.clearLog();
    });
  }

  /** The full next-token distribution after the conversation's prompt, under this session's weights and cache. */
  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    return this.synced(conversation, async (sequence, tokens) => {
      const [result] = await sequence.controlledEvaluate([[tokens.at(-1)!, { generateNext: { probabilities: true } }]]);
      await sequence.eraseContextTokenRanges([{ start: tokens.length - 1, end: sequence.nextTokenIndex }]);
      return toLogProbs(result?.next?.probabilities);
    });
  }

  /** Runs `fn` under the context lock with this session's weights applied and the prompt (all but its last token) cached. */
  private async synced<T>(conversation: Conversation, fn: (sequence: LlamaContextSequence, tokens: Token[], prefill: { reused: number; evaluated: number; ms: number }) => Promise<T>): Promise<T> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.withActiveLane(async (lane, sequence) => {
      await this.applyWeights(lane);
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

  /** Tokens of the conversation's prompt as the model would read it now (what the window must hold). */
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
        this.host.closed(this);
      }
    });
  }

  private async applyWeights(lane: Lane): Promise<void> {
    const versions = lane.versions;
    await lane.slot!.context.applyWeights(versions.length ? versions.join("+") : "base", versions, versions.map((v) => this.host.weightOf(v)));
  }

  private liveSlot(): Slot {
    const slot = this.lane.slot;
    if (!slot) throw new SessionClosedError();
    return slot;
  }

  /**
   * Log-probs of the generated tokens, recomputed by teacher forcing under the same weights. Tokens are
   * fed one per decode, as generation fed them: llama.cpp's numerics depend on the batch split, and this
   * keeps the figures identical to the distributions the tokens were sampled from.
   */
  private async teacherForcedLogprobs(sequence: LlamaContextSequence, prompt: readonly Token[], generated: readonly Token[], k: number): Promise<TokenLogprob[]> {
    const start = prompt.length - 1;
    await sequence.eraseContextTokenRanges([{ start, end: sequence.nextTokenIndex }]);
    const model = this.host.model;
    const out: TokenLogprob[] = [];
    let input = prompt[start]!;
    for (const token of generated) {
      const [result] = await sequence.controlledEvaluate([[input, { generateNext: { probabilities: true } }]]);
      const dist = toLogProbs(result?.next?.probabilities);
      const top = [...dist.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, k)
        .map(([t, logprob]) => ({ token: t, text: model.detokenize([t], true), logprob }));
      out.push({ token, text: model.detokenize([token], true), logprob: dist.get(token) ?? -Infinity, top });
      input = token;
    }
    if (generated.length) await sequence.evaluateWithoutGeneratingNewTokens([input]);
    return out;
  }

  private steeringTokens(name: string | undefined): Token[] {
    // wrappers with a parallel-call section (Mistral's [TOOL_CALLS][) only parse calls that open it
    const { call, parallelism } = this.host.chatWrapper.settings.functions;
    const prefix = LlamaText([parallelism?.call.sectionPrefix ?? "", call.prefix]);
    const tokens = prefix.tokenize(this.host.model.tokenizer);
    return name ? [...tokens, ...this.host.model.tokenize(name)] : tokens;
  }

  /** The tokens that end a JSON string, object or array: forced near a steered turn's limit so its call completes. */
  private closerTokens(): Record<'"' | "}" | "]", Token> {
    const token = (c: string) => this.host.model.tokenize(c)[0]!;
    return { '"': token('"'), "}": token("}"), "]": token("]") };
  }

  private ensureOpen() {
    if (this.closed) throw new SessionClosedError();
  }

  private ensureFits(tokens: number) {
    if (tokens > this.contextSize) throw new ContextOverflowError(tokens, this.contextSize);
  }

  private async timed(fn: () => Promise<void>): Promise<number> {
    const started = now();
    await fn();
    return now() - started;
  }
}

/**
 * Brings the sequence to `tokens` minus the last one (node-llama-cpp evaluates the last prompt token
 * itself when it samples), reusing the longest cached prefix. Caller holds the lock with weights applied.
 */
async function syncPrefix(sequence: LlamaContextSequence, tokens: readonly Token[]): Promise<{ reused: number; evaluated: number; ms: number }> {
  const started = now();
  const target = tokens.slice(0, -1);
  await sequence.adaptStateToTokens(target, false);
  const reused = sequence.nextTokenIndex;
  const rest = target.slice(reused);
  if (rest.length) await sequence.evaluateWithoutGeneratingNewTokens(rest);
  return { reused, evaluated: rest.length, ms: now() - started };
}

/**
 * A bias that also ends the generation once `full()` holds: checked as each token is sampled, the stop deferred
 * out of the native sampling callback (which must never throw), so it lands before the next token.
 */
function limited(model: LlamaModel, bias: TokenBias | (() => TokenBias) | undefined, full: () => boolean, stop: () => void): () => TokenBias {
  let stopping = false;
  const none = new TokenBias(model.tokenizer);
  return () => {
    if (!stopping && full()) {
      stopping = true;
      queueMicrotask(stop);
    }
    return (typeof bias === "function" ? bias() : bias) ?? none;
  };
}

export function toLogProbs(probabilities: Map<Token, number> | undefined): LogProbs {
  const out: LogProbs = new Map();
  for (const [token, p] of probabilities ?? []) out.set(token, Math.log(p));
  return out;
}

function finishReason(stopReason: string, calls: number): FinishReason {
  if (stopReason === "abort") return "cancelled";
  if (calls > 0 || stopReason === "functionCalls") return "tool_calls";
  if (stopReason === "maxTokens") return "length";
  return "stop";
}

