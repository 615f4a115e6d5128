import { LlamaChat, LlamaText, type ChatWrapper, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { renderConversation, toChatModelFunctions } from "../chat/render.js";
import { generationBias } from "../chat/bias.js";
import type { EngineContext } from "../context/EngineContext.js";
import { ContextOverflowError, SessionClosedError } from "../errors.js";
import type { AdapterWeight } from "../llama/internals.js";
import type {
  Conversation,
  FinishReason,
  GenerateOptions,
  GenerateResult,
  GeneratedCall,
  SwitchReport,
  TokenLogprob,
} from "../engine/types.js";

/** What a session needs from its engine. */
export interface SessionHost {
  readonly model: LlamaModel;
  readonly chatWrapper: ChatWrapper;
  /** The current version of an alias; throws UnknownAdapterError for an alias not in the library. */
  resolve(alias: string): string;
  weightOf(version: string): AdapterWeight;
  aliasOf(version: string): string;
  /** The session stopped using some versions (switch or close): the engine may free unused ones. */
  versionsReleased(): void;
  closed(session: EngineSession): void;
}

/** How the session treats its KV cache on a switch. Only tests may choose "keep-stale". */
export type SwitchCachePolicy = "rebuild" | "keep-stale";

const now = () => performance.now();

/** Next-token log-probs, by token id. */
export type LogProbs = Map<Token, number>;

/**
 * One conversation's slot in a shared context: its sequence (KV cache) and its active adapter.
 * Every evaluation holds the context lock and first applies this session's adapter set, so sessions on
 * different adapters can share a context without ever decoding under each other's weights.
 */
export class EngineSession {
  private closed = false;

  constructor(
    readonly id: number,
    private readonly host: SessionHost,
    private readonly slot: EngineContext,
    private readonly sequence: LlamaContextSequence,
    private readonly cachePolicy: SwitchCachePolicy,
    /** The adapter versions applied to this session's evaluations: none (the base), one, or several at once (a static merge). */
    private versions: readonly string[],
  ) {}

  /** null for the base, the alias for one adapter, "a+b" for several applied together. */
  get activeAdapter(): string | null {
    return this.versions.length ? this.versions.map((v) => this.host.aliasOf(v)).join("+") : null;
  }

  /** The exact adapter versions in use: a session keeps the version it loaded even after its alias is refreshed. */
  get activeVersions(): readonly string[] {
    return this.versions;
  }

  get contextSize(): number {
    return this.sequence.contextSize;
  }

  /** Tokens whose KV the sequence holds now. */
  get cachedTokens(): number {
    return this.sequence.nextTokenIndex;
  }

  /**
   * Makes `to` (an alias, or null for the base) the active adapter and rebuilds the KV cache from the
   * conversation under the new weights, so the next token is computed as if the new weights had seen the
   * whole history. Validates everything first: a refused switch changes nothing.
   */
  async switchAdapter(to: string | null, conversation: Conversation): Promise<SwitchReport> {
    return this.switchAdapters(to === null ? [] : [to], conversation);
  }

  /** As switchAdapter, for a set of adapters applied together (none = the base). */
  async switchAdapters(aliases: readonly string[], conversation: Conversation): Promise<SwitchReport> {
    this.ensureOpen();
    for (const a of aliases) this.host.resolve(a); // refuse an unknown alias before anything changes
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    const queued = now();
    return this.slot.lock.run(async () => {
      const queueMs = now() - queued;
      // resolved under the lock, where the engine also decides what to free: never a version being freed
      const to = aliases.map((a) => this.host.resolve(a));
      const fromSet = this.versions;
      const from = this.activeAdapter;
      const started = now();
      this.versions = to;
      const switchMs = now() - started;
      const toLabel = this.activeAdapter;
      const released = fromSet.some((v) => !to.includes(v));
      if (this.cachePolicy === "keep-stale" || sameSet(fromSet, to)) {
        if (released) queueMicrotask(() => this.host.versionsReleased());
        return { from, to: toLabel, switchMs, rebuild: { tokens: 0, reused: this.sequence.nextTokenIndex, ms: 0 }, queueMs };
      }
      try {
        await this.applyWeights();
        const rebuildStart = now();
        // The cached keys/values were computed under the old weights: none of them may be reused.
        await this.sequence.clearHistory();
        const { evaluated } = await this.syncPrefix(tokens);
        // only once the switch succeeded may the old versions be freed (on failure the session goes back to them)
        if (released) queueMicrotask(() => this.host.versionsReleased());
        return { from, to: toLabel, switchMs, rebuild: { tokens: evaluated, reused: 0, ms: now() - rebuildStart }, queueMs };
      } catch (err) {
        this.versions = fromSet;
        await this.sequence.clearHistory();
        throw err;
      }
    });
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.ensureOpen();
    const { history, wrapper, tokens } = renderConversation(this.host.model, this.host.chatWrapper, conversation);
    this.ensureFits(tokens.length + 1);
    // Never let node-llama-cpp shift the context (it would silently drop the start of the prompt).
    const maxTokens = Math.min(options.maxTokens ?? 256, this.sequence.contextSize - tokens.length);
    const queued = now();
    return this.slot.lock.run(async () => {
      const started = now();
      const queueMs = started - queued;
      const adapterSetMs = await this.timed(() => this.applyWeights());
      const prefill = await this.syncPrefix(tokens);
      const decodeStart = now();
      const chat = new LlamaChat({ contextSequence: this.sequence, chatWrapper: wrapper, autoDisposeSequence: false });
      const steerTokens = options.steerToolCall ? this.steeringTokens(options.steerToolCall.name) : undefined;
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
          tokenBias: generationBias(this.host.model, options.tokenBias, steerTokens && { tokens: steerTokens, sequence: this.sequence, promptLength: tokens.length }),
          signal: options.signal,
          stopOnAbortSignal: true,
          onToken: options.onToken && ((chunk) => options.onToken!((generated += chunk.length))),
          maxParallelFunctionCalls: 1,
        });
      } finally {
        chat.dispose({ disposeSequence: false });
      }
      const decodeMs = now() - decodeStart;
      const generatedTokens = this.sequence.contextTokens.slice(tokens.length);
      const logprobsStart = now();
      const logprobs = options.topLogprobs ? await this.teacherForcedLogprobs(tokens, generatedTokens, options.topLogprobs) : undefined;
      const logprobsMs = options.topLogprobs ? now() - logprobsStart : 0;
      const calls: GeneratedCall[] = (response.functionCalls ?? []).map((c) => ({ name: c.functionName, arguments: c.params, raw: c.raw }));
      return {
        text: response.response,
        calls,
        finishReason: finishReason(response.metadata.stopReason, calls.length),
        adapter: this.activeAdapter,
        tokens: {
          prompt: tokens.length,
          cached: prefill.reused,
          evaluated: tokens.length - prefill.reused,
          generated: generatedTokens.length,
        },
        timings: { queueMs, adapterSetMs, prefillMs: prefill.ms, decodeMs, logprobsMs, totalMs: now() - started },
        ...(logprobs ? { logprobs } : {}),
      };
    });
  }

  /** Evaluates what the cache lacks of the conversation's prompt under this session's weights (a warm-up). */
  async prefill(conversation: Conversation): Promise<{ reused: number; evaluated: number; ms: number }> {
    return this.synced(conversation, async (_tokens, prefill) => prefill);
  }

  /** Drops the session's cached KV; the next call re-evaluates the prompt from the start. */
  async clearCache(): Promise<void> {
    this.ensureOpen();
    await this.slot.lock.run(() => this.sequence.clearHistory());
  }

  /** The full next-token distribution after the conversation's prompt, under this session's weights and cache. */
  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    return this.synced(conversation, async (tokens) => {
      const [result] = await this.sequence.controlledEvaluate([[tokens.at(-1)!, { generateNext: { probabilities: true } }]]);
      await this.sequence.eraseContextTokenRanges([{ start: tokens.length - 1, end: this.sequence.nextTokenIndex }]);
      return toLogProbs(result?.next?.probabilities);
    });
  }

  /** Runs `fn` under the context lock with this session's weights applied and the prompt (all but its last token) cached. */
  private async synced<T>(conversation: Conversation, fn: (tokens: Token[], prefill: { reused: number; evaluated: number; ms: number }) => Promise<T>): Promise<T> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.slot.lock.run(async () => {
      await this.applyWeights();
      return fn(tokens, await this.syncPrefix(tokens));
    });
  }

  private render(conversation: Conversation): Token[] {
    return renderConversation(this.host.model, this.host.chatWrapper, conversation).tokens;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.slot.lock.run(async () => this.sequence.dispose());
    } finally {
      this.host.closed(this);
    }
  }

  private async applyWeights(): Promise<void> {
    await this.slot.applyWeights(this.versions.length ? this.versions.join("+") : "base", this.versions, this.versions.map((v) => this.host.weightOf(v)));
  }

  /**
   * Brings the sequence to `tokens` minus the last one (node-llama-cpp evaluates the last prompt token
   * itself when it samples), reusing the longest cached prefix. Caller holds the lock with weights applied.
   */
  private async syncPrefix(tokens: readonly Token[]): Promise<{ reused: number; evaluated: number; ms: number }> {
    const started = now();
    const target = tokens.slice(0, -1);
    await this.sequence.adaptStateToTokens(target, false);
    const reused = this.sequence.nextTokenIndex;
    const rest = target.slice(reused);
    if (rest.length) await this.sequence.evaluateWithoutGeneratingNewTokens(rest);
    return { reused, evaluated: rest.length, ms: now() - started };
  }

  /**
   * Log-probs of the generated tokens, recomputed by teacher forcing under the same weights. Tokens are
   * fed one per decode, as generation fed them: llama.cpp's numerics depend on the batch split, and this
   * keeps the figures identical to the distributions the tokens were sampled from.
   */
  private async teacherForcedLogprobs(prompt: readonly Token[], generated: readonly Token[], k: number): Promise<TokenLogprob[]> {
    const start = prompt.length - 1;
    await this.sequence.eraseContextTokenRanges([{ start, end: this.sequence.nextTokenIndex }]);
    const model = this.host.model;
    const out: TokenLogprob[] = [];
    let input = prompt[start]!;
    for (const token of generated) {
      const [result] = await this.sequence.controlledEvaluate([[input, { generateNext: { probabilities: true } }]]);
      const dist = toLogProbs(result?.next?.probabilities);
      const top = [...dist.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, k)
        .map(([t, logprob]) => ({ token: t, text: model.detokenize([t], true), logprob }));
      out.push({ token, text: model.detokenize([token], true), logprob: dist.get(token) ?? -Infinity, top });
      input = token;
    }
    if (generated.length) await this.sequence.evaluateWithoutGeneratingNewTokens([input]);
    return out;
  }

  private steeringTokens(name: string | undefined): Token[] {
    const prefix = LlamaText(this.host.chatWrapper.settings.functions.call.prefix);
    const tokens = prefix.tokenize(this.host.model.tokenizer);
    return name ? [...tokens, ...this.host.model.tokenize(name)] : tokens;
  }

  private ensureOpen() {
    if (this.closed) throw new SessionClosedError();
  }

  private ensureFits(tokens: number) {
    if (tokens > this.sequence.contextSize) throw new ContextOverflowError(tokens, this.sequence.contextSize);
  }

  private async timed(fn: () => Promise<void>): Promise<number> {
    const started = now();
    await fn();
    return now() - started;
  }
}

const sameSet = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x) => b.includes(x));

function toLogProbs(probabilities: Map<Token, number> | undefined): LogProbs {
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

