import {
  resolveChatWrapper,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
} from "./llama/nodeLlamaCpp.js";
import type {
  AdapterInfo,
  AdapterSpec,
  AdapterVersion,
  CacheStats,
  CacheStrategy,
  Conversation,
  Engine,
  EngineCapabilities,
  EngineCapacity,
  EngineLogger,
  ModelInfo,
  OpenSessionOptions,
  TokenId,
} from "../../engine/index.js";
import { DuplicateAdapterError, UnknownAdapterError, VersionPins } from "../../engine/index.js";
import { invocationStart } from "./adapters/invocation.js";
import { ResidentAdapters } from "./adapters/ResidentAdapters.js";
import { BackgroundScheduler } from "./background/BackgroundScheduler.js";
import { Lane } from "./cache/Lane.js";
import { LaneKey } from "./cache/LaneKey.js";
import { LanePool } from "./cache/LanePool.js";
import { prefixKeyOf, PrefixStore } from "./cache/PrefixStore.js";
import { SpillStore } from "./cache/SpillStore.js";
import { renderConversation } from "./chat/render.js";
import { EngineContext } from "./context/EngineContext.js";
import { WorkLog, type LockHold } from "./context/WorkLog.js";
import { assertLlamaInternals, switchContextWeights } from "./llama/internals.js";
import { MIN_DECODE_TOKENS } from "./session/laneSync.js";
import { LocalEngineSession } from "./session/LocalEngineSession.js";
import type { LocalEngineServices } from "./session/LocalEngineServices.js";
import type { SessionRules } from "./session/SessionRules.js";
import { firstCuttable } from "./cache/slidingWindow.js";
import { switchStrategy, type SwitchStrategy } from "./session/SwitchStrategy.js";
import { loadModel } from "./model/loadModel.js";
import type { CacheOptions, LocalEngineOptions } from "./options.js";

const DEFAULTS = { contextSize: 8192, sequencesPerContext: 4, maxContexts: 2, batchSize: 512, swaFullCache: false };
const DEFAULT_CACHE: Required<Omit<CacheOptions, "spillDir">> & Pick<CacheOptions, "spillDir"> = {
  strategy: "reuse",
  spillBytes: 512 * 1024 * 1024,
  sharedPrefixes: true,
  background: true,
  backgroundDecodeMs: 50,
};
/**
 * Quiet time after the last caller's evaluation before background work starts: a client's next call usually comes
 * sooner.
 */
const BACKGROUND_IDLE_MS = 20;
/**
 * After a turn a tool usually runs (a client's call after a switch comes within a few ms; its tool takes far longer).
 */
const BACKGROUND_AFTER_TURN_MS = 2;
type Sizes = Required<
  Pick<LocalEngineOptions, "contextSize" | "sequencesPerContext" | "maxContexts" | "batchSize" | "swaFullCache">
>;

/**
 * The local engine: one frozen base model in this process (llama.cpp through node-llama-cpp) with its
 * resident adapters, the contexts they run in, and the sessions on them.
 */
export class LocalEngine implements Engine {
  private nextSessionId = 1;
  private readonly host: LocalEngineServices;
  private disposed = false;
  /** The library as the engine sees it: each alias's current version. */
  private readonly current = new Map<string, AdapterVersion>();
  private readonly sessions = new Map<number, LocalEngineSession>();
  private collecting: Promise<void> = Promise.resolve();
  private readonly pool: LanePool;
  /** What switches do with the KV cache: chosen once, here. */
  private readonly strategy: SwitchStrategy;
  private readonly prefixes: PrefixStore | undefined;
  private readonly work: BackgroundScheduler;
  /** Every hold of every context's lock, with timestamps: what a caller waited for. */
  private readonly workLog = new WorkLog();
  readonly capabilities: EngineCapabilities = {
    logProbs: true,
    runtimeAdapterLoading: true,
    adapterSets: true,
    // llama.cpp's key, read from the file (node-llama-cpp exposes nothing for it); applied by the engine's own lanes
    alora: true,
    grammar: true,
    cacheStrategies: ["rebuild", "reuse"],
  };
  readonly capacity: EngineCapacity;

  private constructor(
    private readonly llama: Llama,
    private readonly llamaModel: LlamaModel,
    private readonly resident: ResidentAdapters,
    readonly model: ModelInfo,
    readonly threads: number,
    private readonly opts: Sizes,
    readonly cacheStrategy: CacheStrategy,
    spill: SpillStore | undefined,
    cache: Required<Omit<CacheOptions, "spillDir">>,
    private readonly logger: EngineLogger,
  ) {
    this.strategy = switchStrategy(cacheStrategy);
    const reuse = cacheStrategy === "reuse";
    this.prefixes = reuse && cache.sharedPrefixes && spill ? new PrefixStore(spill, logger) : undefined;
    this.work = new BackgroundScheduler({
      enabled: reuse && cache.background,
      decodeMs: cache.backgroundDecodeMs,
      minTokens: MIN_DECODE_TOKENS,
      maxTokens: Math.max(MIN_DECODE_TOKENS, opts.batchSize),
      idleMs: BACKGROUND_IDLE_MS,
      afterTurnMs: BACKGROUND_AFTER_TURN_MS,
      logger,
    });
    this.capacity = {
      sessions: opts.maxContexts * opts.sequencesPerContext,
      contexts: opts.maxContexts,
      contextSize: opts.contextSize,
    };
    this.pool = new LanePool({
      maxContexts: opts.maxContexts,
      sequencesPerContext: opts.sequencesPerContext,
      spill,
      logger,
      createContext: async () => {
        const context = await this.llamaModel.createContext({
          ...this.contextOptions(),
          sequences: this.opts.sequencesPerContext,
        });
        assertLlamaInternals(this.llamaModel, context);
        return new EngineContext(context, this.workLog, this.pool.contexts.length);
      },
    });
    this.host = {
      model: llamaModel,
      chatWrapper: resolveChatWrapper(llamaModel),
      pool: this.pool,
      prefixes: this.prefixes,
      work: this.work,
      resolve: (alias) => this.versionOf(alias),
      weightOf: (version) => resident.weight(version),
      invocationOf: (version) => resident.get(version).invocationTokens,
      pin: (versions) => this.pin(versions),
      unpin: (versions) => this.unpin(versions),
      versionsReleased: () => void this.collect(),
      closed: (sessionId) => {
        this.sessions.delete(sessionId);
        void this.collect();
      },
    };
  }

  /** Validates the model file (llama.cpp aborts the process on some bad metadata), then loads it once. */
  static async load(options: LocalEngineOptions): Promise<LocalEngine> {
    const { llama, llamaModel, header, info, threads, errors } = await loadModel(options);
    const cache = { ...DEFAULT_CACHE, ...options.cache };
    const engine = new LocalEngine(
      llama,
      llamaModel,
      new ResidentAdapters(llamaModel, header, errors),
      info,
      threads,
      {
        contextSize: Math.min(options.contextSize ?? DEFAULTS.contextSize, llamaModel.trainContextSize),
        sequencesPerContext: options.sequencesPerContext ?? DEFAULTS.sequencesPerContext,
        maxContexts: options.maxContexts ?? DEFAULTS.maxContexts,
        batchSize: options.batchSize ?? DEFAULTS.batchSize,
        swaFullCache: options.swaFullCache ?? DEFAULTS.swaFullCache,
      },
      cache.strategy,
      cache.strategy === "reuse" && cache.spillDir !== null
        ? SpillStore.open(cache.spillDir, cache.spillBytes, info.sha256.slice(0, 16))
        : undefined,
      cache,
      options.logger,
    );
    options.logger.info(
      {
        model: info.filePath,
        architecture: info.architecture,
        chatWrapper: info.chatWrapper,
        gpu: llama.gpu,
        threads,
        cache: cache.strategy,
      },
      "base model loaded",
    );
    return engine;
  }

  async addAdapter(spec: AdapterSpec): Promise<AdapterInfo> {
    if (this.current.has(spec.alias)) throw new DuplicateAdapterError(spec.alias);
    const info = await this.resident.load(spec);
    this.current.set(spec.alias, info.version);
    this.logger.info(
      {
        alias: info.alias,
        sha256: info.sha256,
        rank: info.rank,
        scale: info.scale,
        activated: Boolean(info.invocationTokens),
      },
      "adapter resident",
    );
    return info;
  }

  async refreshAdapter(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const previous = this.adapter(spec.alias);
    const info = await this.resident.load(spec);
    this.current.set(spec.alias, info.version);
    this.logger.info(
      { alias: spec.alias, from: previous.sha256, to: info.sha256, scale: info.scale },
      "adapter refreshed",
    );
    await this.collect();
    return { previous, current: info };
  }

  async removeAdapter(alias: string): Promise<AdapterInfo> {
    const info = this.adapter(alias);
    this.current.delete(alias);
    this.logger.info({ alias }, "adapter removed from the library");
    await this.collect();
    return info;
  }

  adapter(alias: string): AdapterInfo {
    return this.resident.get(this.versionOf(alias));
  }

  adapters(): AdapterInfo[] {
    return [...this.current.values()].map((v) => this.resident.get(v));
  }

  residentVersions(): AdapterInfo[] {
    return this.resident.list();
  }

  /** The version is some alias's current one. */
  private isCurrent(version: AdapterVersion): boolean {
    return [...this.current.values()].some((v) => v.equals(version));
  }

  /** An alias's current version (a resident version's own id is accepted too). */
  private versionOf(alias: string): AdapterVersion {
    const version = this.current.get(alias) ?? this.resident.find(alias);
    if (!version) throw new UnknownAdapterError(alias, [...this.current.keys()]);
    return version;
  }

  /**
   * Frees every version that is neither current for an alias, nor active in an open session, nor held by an
   * idle lane, nor pinned by a switch or a reference under way. Lanes no switch can reach any more (their
   * weights were refreshed or removed) are dropped first.
   */
  collect(): Promise<void> {
    // most calls (every switch makes one) find nothing to free: skip taking every context lock then
    if (this.resident.list().every((v) => this.isCurrent(v.version))) return this.collecting;
    this.collecting = this.collecting
      .then(() =>
        // Every context lock is held while deciding and freeing: no evaluation can apply a version in between.
        this.withAllContextLocks(async () => {
          if (this.disposed) return;
          for (const session of this.sessions.values()) await session.dropUnreachableLanes();
          // asked again for each version, after the awaits: a refresh back to the same bytes makes a version current
          // again
          const holds = (versions: readonly AdapterVersion[], version: AdapterVersion) =>
            versions.some((v) => v.equals(version));
          const inUse = (version: AdapterVersion) =>
            this.isCurrent(version) ||
            this.pinned.has(version) ||
            [...this.sessions.values()].some((s) => holds(s.activeVersions, version)) ||
            this.pool.idleLanes().some((l) => holds(l.versions, version));
          for (const { version } of this.resident.list()) {
            if (inUse(version)) continue;
            for (const context of this.pool.contexts) await context.detach(version);
            if (inUse(version)) continue; // detached only: the next evaluation applies it again
            await this.resident.free(version);
            this.logger.info({ version: version.toString() }, "adapter version freed");
          }
        }),
      )
      .catch((err) => this.logger.error({ err: (err as Error).message }, "freeing unused adapters failed"));
    return this.collecting;
  }

  private withAllContextLocks<T>(fn: () => Promise<T>, i = 0): Promise<T> {
    const context = this.pool.contexts[i];
    return context ? context.lock.run(() => this.withAllContextLocks(fn, i + 1)) : fn();
  }

  /** Versions a switch or a reference context is using; collect leaves them alone. */
  private readonly pinned = new VersionPins();

  private pin(versions: readonly AdapterVersion[]): void {
    this.pinned.pin(versions);
  }

  private unpin(versions: readonly AdapterVersion[]): void {
    if (this.pinned.unpin(versions).some((v) => !this.isCurrent(v))) void this.collect();
  }

  async openSession(options: OpenSessionOptions = {}): Promise<LocalEngineSession> {
    return this.openSessionWith({
      adapters: options.adapters ?? (options.adapter ? [options.adapter] : []),
      ...(options.promptScope !== undefined ? { promptScope: options.promptScope } : {}),
    });
  }

  /**
   * @internal Tests reach other session rules (a planted bug such as keeping the stale cache, careless lane or
   * prefix keys, an invocation point off by one, background work under the wrong weights) through
   * testing.ts (beside this file), to prove that each mechanism matters.
   */
  async openSessionWith(
    options: { adapters?: readonly string[] } & Partial<SessionRules>,
  ): Promise<LocalEngineSession> {
    const { adapters = [], ...given } = options;
    for (const a of adapters) this.versionOf(a); // fail fast on an unknown alias
    const slot = await this.work.foreground(() => this.pool.acquire());
    // resolved and registered together, after the await: a refresh in between cannot hand out a freed version
    const versions = adapters.map((a) => this.versionOf(a));
    const id = this.nextSessionId++;
    const rules: SessionRules = {
      strategy: this.strategy,
      keyOf: (v) => LaneKey.of(this.model.sha256, v),
      invocationOf: invocationStart,
      prefixKeyOf,
      backgroundWeights: (lane) => lane.versions,
      cutFloor: firstCuttable,
      promptScope: `session:${id}`,
      ...given,
    };
    const lane = new Lane(id, rules.keyOf(versions), versions);
    lane.attach(slot);
    const session = new LocalEngineSession(id, this.host, rules, lane);
    this.sessions.set(id, session);
    return session;
  }

  cacheStats(): CacheStats {
    const { batches, ms, yields, lanesStarted, tokens } = this.work.totals;
    return {
      strategy: this.cacheStrategy,
      ...this.pool.stats(),
      evaluatedTokens: { foreground: this.work.foregroundTokens, background: tokens },
      background: { enabled: this.work.enabled, batches, ms: Math.round(ms), yields, lanesStarted },
      sharedPrefixes: this.prefixes?.stats() ?? { enabled: false, entries: 0, bytes: 0, hits: 0, saved: 0 },
    };
  }

  /**
   * @internal Every recent hold of a context lock (callers' and background work's), with timestamps: tests and the
   * bench check waits with it.
   */
  lockHolds(): readonly LockHold[] {
    return this.workLog.list();
  }

  renderTokens(conversation: Conversation): Token[] {
    return renderConversation(this.llamaModel, this.host.chatWrapper, conversation).tokens;
  }

  tokenize(text: string): Token[] {
    return this.llamaModel.tokenize(text, false);
  }

  detokenize(tokens: readonly TokenId[]): string {
    return this.llamaModel.detokenize(tokens as readonly Token[], true);
  }

  /**
   * @internal The test oracle's door (testing.ts `referenceNextTokenLogProbs`): `fn` gets `count` fresh contexts of
   * one sequence each, with the numerics of the sessions' contexts, the first with `aliases`' weights switched on;
   * the versions stay pinned and the contexts are freed after.
   */
  async withReferenceContexts<T>(
    aliases: readonly string[],
    count: number,
    fn: (sequences: LlamaContextSequence[]) => Promise<T>,
  ): Promise<T> {
    const versions = aliases.map((a) => this.versionOf(a));
    const weights = versions.map((v) => this.resident.weight(v));
    this.pin(versions);
    return this.work.foreground(async () => {
      const contexts: LlamaContext[] = [];
      try {
        for (let i = 0; i < count; i++)
          contexts.push(await this.llamaModel.createContext({ ...this.contextOptions(), sequences: 1 }));
        await switchContextWeights(contexts[0]!, weights);
        return await fn(contexts.map((c) => c.getSequence()));
      } finally {
        for (const c of contexts) await c.dispose();
        this.unpin(versions);
      }
    });
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    await this.work.stop();
    await this.collecting;
    this.disposed = true;
    for (const c of this.pool.contexts) await c.dispose();
    this.pool.dispose();
    await this.llamaModel.dispose();
    await this.llama.dispose();
    this.logger.info({ model: this.model.filePath }, "base model freed");
  }

  /** Session contexts and reference contexts share these, so both evaluate with the same numerics. */
  private contextOptions() {
    return {
      contextSize: this.opts.contextSize,
      batchSize: this.opts.batchSize,
      threads: this.threads,
      swaFullCache: this.opts.swaFullCache,
    };
  }
}
