import {
  aliasesOf,
  ContextOverflowError,
  SessionClosedError,
  WeightSet,
  type AdapterVersion,
  type BackgroundWork,
  type Conversation,
  type EngineSession,
  type GenerateOptions,
  type GenerateResult,
  type LaneState,
  type LogProbs,
  type PrefillReport,
  type SwitchReport,
  type TokenId,
  type WeightRequest,
} from "../../../engine/index.js";
import { Mutex } from "../../../mutex.js";
import type { Flavor } from "../flavors/Flavor.js";
import type { RemoteEngineServices } from "./RemoteEngineServices.js";
import { generateTurn } from "./remoteTurn.js";
import { distributionAfter } from "./remoteLogProbs.js";
import { sameVersions, SessionCache } from "./SessionCache.js";

/**
 * One conversation on a remote engine. Its cache is the engine's (llama-server: the session's own slot; vLLM and
 * SGLang: their prefix caches keyed by adapter name), so a switch only changes which adapters the next requests
 * name, and evaluates the history under them at once (a prefill request). Every request names its adapters in
 * full; on a slot, the engine may continue from its cache only where the prompt agrees with what the session
 * knows it computed there under the same adapters, and evaluates everything else again (a switch, a new
 * session, after an error). Requests of one session run one at a time, in order. What the session knows of
 * the engine's cache is in `SessionCache`, a turn's generation in remoteTurn.ts.
 */
export class RemoteEngineSession implements EngineSession {
  private versions: AdapterVersion[];
  private readonly cache: SessionCache;
  private closed = false;
  private readonly lock = new Mutex();
  readonly contextSize: number;

  constructor(
    readonly id: number,
    private readonly host: RemoteEngineServices,
    /** llama-server: the engine slot this session's cache lives in. */
    slot: number | undefined,
    versions: readonly AdapterVersion[],
    /** A planted flavor (tests only); default the engine's. */
    flavor?: Flavor,
  ) {
    this.versions = [...versions];
    this.contextSize = host.capacity.contextSize;
    this.cache = new SessionCache(host, slot, flavor);
  }

  get activeAdapter(): string | null {
    return this.weightsOf(this.versions).label;
  }

  /** The versions as a weight set (its label names them in reports). */
  private weightsOf(versions: readonly AdapterVersion[]): WeightSet {
    return WeightSet.of(this.host.codec.model.sha256, versions);
  }

  get activeVersions(): readonly AdapterVersion[] {
    return this.versions;
  }

  get cachedTokens(): number {
    return this.cache.tokens;
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
    this.cache.forget();
  }

  async switchWeights(to: WeightRequest, conversation: Conversation): Promise<SwitchReport> {
    const aliases = aliasesOf(to);
    this.ensureOpen();
    if (aliases.length > 1 && !this.host.flavor.features.adapterSets) throw this.host.noAdapterSets();
    // an unknown alias, or a set an activated LoRA cannot join, is refused before anything changes
    this.host.ensureApplicable(aliases.map((a) => this.host.resolve(a)));
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    const queued = performance.now();
    return this.lock.run(async () => {
      this.ensureOpen();
      const queueMs = performance.now() - queued;
      const to = aliases.map((a) => this.host.resolve(a));
      this.host.ensureApplicable(to); // resolved again: a refresh may have landed while the switch waited
      this.host.pin(to);
      try {
        const from = this.activeAdapter;
        if (sameVersions(to, this.versions)) {
          this.versions = to;
          return {
            from,
            to: this.weightsOf(to).label,
            strategy: "unchanged",
            switchMs: 0,
            rebuild: { tokens: 0, reused: this.cachedTokens, restored: 0, shared: 0, ms: 0 },
            queueMs,
          };
        }
        // the new weights over the whole history now, so the next turn only evaluates what it appends; from the base to
        // an activated LoRA the engine keeps the base's cache before its invocation
        const activating = !this.versions.length && to.length === 1 && !!this.host.invocationOf(to[0]!);
        const prefill = await this.cache.prefill(to, tokens, activating ? "activate" : "switch");
        this.versions = to;
        return {
          from,
          to: this.weightsOf(to).label,
          strategy: this.host.cacheStrategy,
          switchMs: 0,
          rebuild: {
            tokens: prefill?.evaluated ?? 0,
            reused: prefill?.cached ?? 0,
            restored: 0,
            shared: 0,
            ms: prefill?.ms ?? 0,
          },
          queueMs,
        };
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
      const p = await this.cache.prefill(this.versions, tokens, "always");
      return { reused: p?.cached ?? 0, evaluated: p?.evaluated ?? 0, ms: p?.ms ?? 0 };
    });
  }

  async clearCache(): Promise<void> {
    this.ensureOpen();
    await this.lock.run(async () => this.cache.clear());
  }

  async nextTokenLogProbs(conversation: Conversation): Promise<LogProbs> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length);
    return this.lock.run(async () => {
      this.ensureOpen();
      if (this.host.flavor.features.slots) await this.cache.prefill(this.versions, tokens, "ifNeeded");
      const top = await distributionAfter(this.host, this.cache, this.versions, tokens);
      return new Map(top.map((t) => [t.token, t.logprob]));
    });
  }

  async generate(conversation: Conversation, options: GenerateOptions = {}): Promise<GenerateResult> {
    this.ensureOpen();
    const tokens = this.render(conversation);
    this.ensureFits(tokens.length + 1);
    const queued = performance.now();
    return this.lock.run(async () => {
      this.ensureOpen();
      return generateTurn(
        this.host,
        { cache: this.cache, versions: this.versions, adapter: this.activeAdapter, contextSize: this.contextSize },
        conversation,
        tokens,
        options,
        queued,
      );
    });
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
    await this.lock.run(async () => this.host.closed(this.id, this.cache.slot));
  }

  private ensureOpen() {
    if (this.closed) throw new SessionClosedError();
  }

  private ensureFits(tokens: number) {
    if (tokens > this.contextSize) throw new ContextOverflowError(tokens, this.contextSize, this.host.contextLimit);
  }
}
