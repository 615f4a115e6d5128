import { randomBytes } from "node:crypto";
import {
  aliasesOf,
  commonPrefixLength,
  ContextOverflowError,
  SessionClosedError,
  type AdapterVersion,
  type BackgroundWork,
  type CacheStrategy,
  type ChatCodec,
  type Conversation,
  type EngineCapacity,
  type EngineSession,
  type FinishReason,
  type GenerateOptions,
  type GenerateResult,
  type GeneratedCall,
  type LaneState,
  type LogProbs,
  type PrefillReport,
  type SwitchReport,
  type TokenId,
  type TokenLogprob,
  type WeightSet,
} from "../../engine/index.js";
import { Mutex } from "../../mutex.js";
import type { CompletionRequest, CompletionResult, Flavor } from "./flavors/Flavor.js";
import { parseTurn, ResponseTextStream } from "./turn/calls.js";
import { boundStrings, countStrings, ONE_CHARACTER, turnGrammar, type GrammarFunction, type TurnStart } from "./turn/grammar.js";
/** Tokens a character can take at most once the grammar has escaped it ("\\u00e9" is six). */
const TOKENS_PER_CHAR = 6;

const now = () => performance.now();
const label = (versions: readonly AdapterVersion[]) => (versions.length ? versions.map((v) => v.alias).join("+") : null);
const sameVersions = (a: readonly AdapterVersion[], b: readonly AdapterVersion[]) => a.length === b.length && a.every((v, i) => v.equals(b[i]!));

const newSalt = () => randomBytes(16).toString("hex");

/** What a session needs of its engine. */
export interface RemoteEngineServices {
  readonly codec: ChatCodec;
  readonly flavor: Flavor;
  readonly capacity: EngineCapacity;
  readonly cacheStrategy: CacheStrategy;
  readonly engineLabel: string;
  /** Log-probs to ask for when a full distribution is wanted (the vocabulary, or what the engine allows). */
  readonly maxLogprobs: number;
  resolve(alias: string): AdapterVersion;
  pin(versions: readonly AdapterVersion[]): void;
  unpin(versions: readonly AdapterVersion[]): void;
  complete(versions: readonly AdapterVersion[], request: Omit<CompletionRequest, "adapters">, flavor?: Flavor): Promise<CompletionResult>;
  noAdapterSets(): Error;
  /** What gives a session a longer window on this engine (ContextOverflowError's fix). */
  readonly contextLimit: string;
  versionsReleased(): void;
  closed(session: RemoteEngineSession): void;
}

interface Prefilled {
  cached: number;
  evaluated: number;
  ms: number;
}

/**
 * One conversation on a remote engine. Its cache is the engine's (llama-server: the session's own slot; vLLM and
 * SGLang: their prefix caches keyed by adapter name), so a switch only changes which adapters the next requests
 * name, and evaluates the history under them at once (a prefill request). Every request names its adapters in
 * full; on a slot, the engine may continue from its cache only where the prompt agrees with what the session
 * knows it computed there under the same adapters, and evaluates everything else again (a switch, a new
 * session, after an error). Requests of one session run one at a time, in order.
 */
export class RemoteEngineSession implements EngineSession {
  private versions: AdapterVersion[];
  /**
   * Tokens the engine's slot holds for this session, computed by its requests under `versions` (the slot may hold
   * more of them, e.g. the tokens of a turn it generated); undefined when that is not known.
   */
  private cache: TokenId[] | undefined;
  private closed = false;
  private readonly lock = new Mutex();
  /** Keeps other sessions (other clients) off this session's cache in an engine whose prefix cache is shared; a new one on clearCache. */
  private cacheSalt = newSalt();
  readonly contextSize: number;

  constructor(
    readonly id: number,
    private readonly host: RemoteEngineServices,
    /** llama-server: the engine slot this session's cache lives in. */
    readonly slot: number | undefined,
    versions: readonly AdapterVersion[],
    /** A planted flavor (tests only); default the engine's. */
    private readonly flavor?: Flavor,
  ) {
    this.versions = [...versions];
    this.contextSize = host.capacity.contextSize;
  }

  get activeAdapter(): string | null {
    return label(this.versions);
  }

  get activeVersions(): readonly AdapterVersion[] {
    return this.versions;
  }

  get cachedTokens(): number {
    return this.cache?.length ?? 0;
  }

  /** The engine evaluates only what a request asks for: nothing to do ahead of time. */
  anticipate(): void {}

  backgroundWork(): BackgroundWork {
    return { tokens: 0, batches: 0, ms: 0 };
  }

  laneStates(): LaneState[] {
    return [{ weights: this.activeAdapter ?? "base", active: true, state: "live", tokens: this.cachedTokens }];
  }

  /** The engine lost its caches (it restarted): the next request evaluates everything. */
  forgetCache(): void {
    this.cache = undefined;
  }

  async switchWeights(to: WeightSet, conversation: Conversation): Promise<SwitchReport> {
    const aliases = aliasesOf(to);
    this.ensureOpen();
    if (aliases.length > 1 && !this.host.flavor.features.adapterSets) throw this.host.noAdapterSets();
    for (const a of aliases) this.host.resolve(a); // an unknown alias is refused before anything changes
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    const queued = now();
    return this.lock.run(async () => {
      this.ensureOpen();
      const queueMs = now() - queued;
      const to = aliases.map((a) => this.host.resolve(a));
      this.host.pin(to);
      try {
        const from = this.activeAdapter;
        if (sameVersions(to, this.versions)) {
          this.versions = to;
          return { from, to: label(to), strategy: "unchanged", switchMs: 0, rebuild: { tokens: 0, reused: this.cachedTokens, restored: 0, shared: 0, ms: 0 }, queueMs };
        }
        // the new weights over the whole history now, so the next turn only evaluates what it appends
        const prefill = await this.prefillUnder(to, tokens, "switch");
        this.versions = to;
        return { from, to: label(to), strategy: this.host.cacheStrategy, switchMs: 0, rebuild: { tokens: prefill?.evaluated ?? 0, reused: prefill?.cached ?? 0, restored: 0, shared: 0, ms: prefill?.ms ?? 0 }, queueMs };
      } finally {
        this.host.unpin(to);
        queueMicrotask(() => this.host.versionsReleased());
      }
    });
  }

  async prefill(conversation: Conversation): Promise<PrefillReport> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.lock.run(async () => {
      this.ensureOpen();
      const p = await this.prefillUnder(this.versions, tokens, "always");
      return { reused: p?.cached ?? 0, evaluated: p?.evaluated ?? 0, ms: p?.ms ?? 0 };
    });
  }

  async clearCache(): Promise<void> {
    this.ensureOpen();
    await this.lock.run(async () => {
      this.cache = undefined;
      this.cacheSalt = newSalt();
    });
  }

  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.lock.run(async () => {
      this.ensureOpen();
      if (this.host.flavor.features.slots) await this.prefillUnder(this.versions, tokens, "ifNeeded");
      const dist = await this.distributionAfter(tokens);
      return new Map(dist.top.map((t) => [t.token, t.logprob]));
    });
  }

  /**
   * How many of `prompt`'s tokens the engine may take from the session's slot: what the session knows the slot
   * holds under `versions`, where the prompt agrees with it (one is the start of the other). Undefined (evaluate
   * everything) otherwise: the slot may hold another session's cache, a state computed under other adapters, or
   * one put back by a host-memory cache.
   */
  private reusable(versions: readonly AdapterVersion[], prompt: readonly TokenId[]): number | undefined {
    if (!this.cache || !sameVersions(versions, this.versions)) return undefined;
    const agreed = commonPrefixLength(this.cache, prompt);
    return agreed === Math.min(this.cache.length, prompt.length) ? agreed : undefined;
  }

  /**
   * Brings the engine's cache to the prompt minus its last token under `versions`: `switch` evaluates all of it
   * under new adapters, `always` sends the request even if the session knows the slot holds it, `ifNeeded` only
   * when it does not. Where sessions have slots this is what makes every sampled position be evaluated alone,
   * whatever was cached before. Undefined when nothing was sent.
   */
  private async prefillUnder(versions: readonly AdapterVersion[], tokens: readonly TokenId[], mode: "switch" | "always" | "ifNeeded", signal?: AbortSignal): Promise<Prefilled | undefined> {
    const target = tokens.slice(0, -1);
    if (!target.length) return undefined;
    const reuse = mode === "switch" ? undefined : this.reusable(versions, target);
    if (mode === "ifNeeded" && reuse === target.length) return undefined;
    const started = now();
    const r = await this.request(versions, { prompt: target, maxTokens: 0, temperature: 0, reuse, grammar: ONE_CHARACTER, signal });
    this.cache = target;
    const cached = Math.min(r.cached ?? 0, target.length);
    return { cached, evaluated: r.evaluated ?? target.length - cached, ms: now() - started };
  }

  /** The distribution after `tokens` (whose prefix the engine holds): one sampled character, the top `maxLogprobs`. */
  private async distributionAfter(tokens: readonly TokenId[]): Promise<{ top: { token: TokenId; logprob: number }[]; result: CompletionResult }> {
    const result = await this.request(this.versions, { prompt: tokens, maxTokens: 1, temperature: 0, topLogprobs: this.host.maxLogprobs, grammar: ONE_CHARACTER, reuse: this.reusable(this.versions, tokens) });
    this.cache = [...tokens];
    const first = result.logprobs?.[0];
    if (!first) throw new Error(`${this.host.engineLabel} returned no log-probs for the next token`);
    return { top: first.top, result };
  }

  /** One request in the session's slot with its salt; after a failure the session no longer knows what its slot holds. */
  private async request(versions: readonly AdapterVersion[], request: Omit<CompletionRequest, "adapters" | "slot">): Promise<CompletionResult> {
    this.cache = undefined;
    return this.host.complete(versions, { ...request, slot: this.slot, cacheSalt: this.cacheSalt }, this.flavor);
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.ensureOpen();
    const codec = this.host.codec;
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length + 1);
    const queued = now();
    return this.lock.run(async () => {
      this.ensureOpen();
      const started = now();
      const queueMs = started - queued;
      const adapter = this.activeAdapter;
      const maxTokens = Math.min(options.maxTokens ?? 256, this.contextSize - tokens.length);
      const cancelled = (prefillMs = 0): GenerateResult => ({
        text: "",
        calls: [],
        finishReason: "cancelled",
        adapter,
        tokens: { prompt: tokens.length, cached: 0, evaluated: 0, generated: 0 },
        contextRemaining: this.contextSize - tokens.length,
        timings: { queueMs, adapterSetMs: 0, prefillMs, decodeMs: 0, logprobsMs: 0, totalMs: now() - started },
      });
      if (options.signal?.aborted) return cancelled();

      const syntax = codec.callSyntax;
      const names = Object.keys(conversation.functions).filter((n) => !options.callable || options.callable.includes(n));
      const steer = options.steerToolCall;
      const forcedText = steer ? syntax.trigger + (steer.name ?? "") : "";
      const forced = steer ? [...codec.tokenize(syntax.trigger, true), ...(steer.name ? codec.tokenize(steer.name) : [])] : [];
      const grammar = await this.grammar(conversation, names, steer, maxTokens - forced.length);
      const bias = new Map<TokenId, number>();
      for (const [text, logit] of Object.entries(options.tokenBias ?? {})) for (const t of codec.tokenize(text, true)) bias.set(t, logit);

      let prefill: Prefilled | undefined;
      try {
        if (this.host.flavor.features.slots) prefill = await this.prefillUnder(this.versions, tokens, "ifNeeded", options.signal);
        const stream = options.onText && new ResponseTextStream(syntax.trigger, options.onText);
        const decodeStart = now();
        const prompt = [...tokens, ...forced];
        const reuse = this.reusable(this.versions, prompt);
        const r = await this.request(this.versions, {
          prompt,
          maxTokens: Math.max(0, maxTokens - forced.length),
          temperature: options.temperature ?? 0,
          seed: options.seed,
          topK: options.topK,
          topP: options.topP,
          grammar,
          logitBias: bias,
          topLogprobs: options.topLogprobs,
          stop: options.stop,
          showSpecial: syntax.specialTokens,
          reuse,
          signal: options.signal,
          onText:
            options.onText || options.onToken
              ? (text, generated) => {
                  stream?.update(forcedText + text);
                  options.onToken?.(forced.length + generated);
                }
              : undefined,
        });
        // the slot holds the turn's tokens too, but the next prompt has the turn as the template renders it
        this.cache = prompt;
        const decodeMs = now() - decodeStart;
        const output = forcedText + r.text;
        stream?.update(output);
        const parsed = parseTurn(
          output,
          syntax,
          names.map((name) => ({ name, hasParams: conversation.functions[name]!.parameters !== undefined })),
        );
        const calls: GeneratedCall[] = parsed.call ? [{ name: parsed.call.name, arguments: parsed.call.params, raw: codec.rawCall(parsed.call.name, parsed.call.paramsText) }] : [];
        const generated = forced.length + r.generated;
        const logprobsStart = now();
        const logprobs = options.topLogprobs ? await this.generatedLogprobs(tokens, forced, r, options.topLogprobs) : undefined;
        const logprobsMs = options.topLogprobs ? now() - logprobsStart : 0;
        // the engine's own figures: of the prefill when one ran, else of this request
        const cached = Math.min(prefill ? prefill.cached : (r.cached ?? 0), tokens.length);
        const finishReason: FinishReason = calls.length ? "tool_calls" : r.finish === "length" || parsed.truncatedCall ? "length" : "stop";
        return {
          text: parsed.text,
          calls,
          finishReason,
          adapter,
          tokens: { prompt: tokens.length, cached, evaluated: tokens.length - cached, generated },
          contextRemaining: this.contextSize - tokens.length - generated,
          timings: { queueMs, adapterSetMs: 0, prefillMs: prefill?.ms ?? 0, decodeMs, logprobsMs, totalMs: now() - started },
          ...(logprobs ? { logprobs } : {}),
        };
      } catch (err) {
        if (options.signal?.aborted) return cancelled(prefill?.ms);
        throw err;
      }
    });
  }

  /** The function-calling grammar of this turn; a steered call's free strings are bounded so it ends within the turn's tokens. */
  private async grammar(conversation: Conversation, names: readonly string[], steer: GenerateOptions["steerToolCall"], budget: number): Promise<string> {
    const codec = this.host.codec;
    const syntax = codec.callSyntax;
    const functions: GrammarFunction[] = [];
    for (const name of names) {
      let schema = conversation.functions[name]!.parameters;
      if (schema && steer) {
        const fixed = codec.tokenize(syntax.paramsPrefix + syntax.suffix, true).length + 8 * (Object.keys((schema.properties as object | undefined) ?? {}).length + 1);
        const strings = countStrings(schema);
        if (strings) schema = boundStrings(schema, Math.max(1, Math.floor((budget - fixed) / (strings * TOKENS_PER_CHAR))));
      }
      functions.push({ name, params: schema && (await codec.paramsGrammar(schema)) });
    }
    const start: TurnStart = !steer ? { kind: "text" } : steer.name ? { kind: "arguments", name: steer.name } : { kind: "call" };
    return turnGrammar(syntax, functions, start);
  }

  /**
   * Per generated token, the log-probs the engine sampled it from. Where the engine left tokens out (llama-server
   * drops those that end inside a character) or the token was forced, they are recomputed by teacher forcing: one
   * request per position, each evaluating one new token as generation did, so the figures are the same.
   */
  private async generatedLogprobs(rendered: readonly TokenId[], forced: readonly TokenId[], r: CompletionResult, k: number): Promise<TokenLogprob[]> {
    const codec = this.host.codec;
    const text = (t: TokenId) => codec.detokenize([t], true);
    const entry = (token: TokenId, logprob: number, top: { token: TokenId; logprob: number }[]): TokenLogprob => ({ token, text: text(token), logprob, top: top.slice(0, k).map((t) => ({ ...t, text: text(t.token) })) });
    if (!forced.length && r.logprobs && r.logprobs.length === r.generated) return r.logprobs.map((l) => entry(l.token, l.logprob, l.top));
    if (!r.tokens || this.host.flavor.features.logProbs !== "full") return (r.logprobs ?? []).map((l) => entry(l.token, l.logprob, l.top));
    const all = [...forced, ...r.tokens];
    const out: TokenLogprob[] = [];
    for (let i = 0; i < all.length; i++) {
      const { top } = await this.distributionAfter([...rendered, ...all.slice(0, i)]);
      out.push(entry(all[i]!, top.find((t) => t.token === all[i])?.logprob ?? -Infinity, top));
    }
    return out;
  }

  promptTokens(conversation: Conversation): number {
    return this.render(conversation).length;
  }

  private render(conversation: Conversation): TokenId[] {
    return this.host.codec.renderTokens(conversation);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.lock.run(async () => this.host.closed(this));
  }

  private ensureOpen() {
    if (this.closed) throw new SessionClosedError();
  }

  private ensureFits(tokens: number) {
    if (tokens > this.contextSize) throw new ContextOverflowError(tokens, this.contextSize, this.host.contextLimit);
  }
}
