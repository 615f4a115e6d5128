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
import { EngineContext, weightSetKey } from "./context/EngineContext.js";
import { DecodeRounds, type SameRound } from "./context/DecodeRounds.js";
import { WorkLog, type DecodeHold } from "./context/WorkLog.js";
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
  /** Every decode's wait for its round and its run, with timestamps: what a caller waited for. */
  private readonly workLog = new WorkLog();
  /** Every decode of every context, in rounds of one context and weight set. */
  private readonly rounds: DecodeRounds;
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
    sameRound: SameRound | undefined,
  ) {
    // a round holds what one of node-llama-cpp's batches holds (it makes them at least one token per sequence)
    this.rounds = new DecodeRounds(this.workLog, Math.max(opts.batchSize, opts.sequencesPerContext), sameRound);
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
    const sequences = opts.maxContexts * opts.sequencesPerContext;
    this.capacity = {
      sessions: sequences,
      contexts: opts.maxContexts,
      // every session's call may run: sessions under one weight set decode in one batch (context/DecodeRounds.ts)
      concurrentCalls: sequences,
      contextSize: opts.contextSize,
    };
    this.pool = new LanePool({
      maxContexts: opts.maxContexts,
      sequencesPerContext: opts.sequencesPerContext,
      spill,
      logger,
      createContext: async (home) => {
        const context = await this.llamaModel.createContext({
          ...this.contextOptions(),
          sequences: this.opts.sequencesPerContext,
        });
        assertLlamaInternals(this.llamaModel, context);
        return new EngineContext(context, this.pool.contexts.length, home, this.rounds, (v) => this.resident.weight(v));
      },
    });
    this.host = {
      model: llamaModel,
      chatWrapper: resolveChatWrapper(llamaModel),
      pool: this.pool,
      prefixes: this.prefixes,
      work: this.work,
      resolve: (alias) => this.versionOf(alias),
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

  /**
   * Validates the model file (llama.cpp aborts the process on some bad metadata), then loads it once. `planted`
   * (@internal): tests plant careless decode rounds through testing.ts, to prove the rule matters.
   */
  static async load(options: LocalEngineOptions, planted: { sameRound?: SameRound } = {}): Promise<LocalEngine> {
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
      planted.sameRound,
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
    // most calls (every switch makes one) find nothing to free: skip stopping every decode then
    if (this.resident.list().every((v) => this.isCurrent(v.version))) return this.collecting;
    this.collecting = this.collecting
      .then(async () => {
        for (const session of this.sessions.values()) await session.dropUnreachableLanes();
        // no decode runs while deciding and freeing: none can apply a version in between
        await this.rounds.exclusive(() => this.freeUnused());
      })
      .catch((err) => this.logger.error({ err: (err as Error).message }, "freeing unused adapters failed"));
    return this.collecting;
  }

  /** Frees the resident versions nothing uses. Inside `DecodeRounds.exclusive`. */
  private async freeUnused(): Promise<void> {
    if (this.disposed) return;
    // asked again for each version, after the awaits: a refresh back to the same bytes makes a version current again
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
      if (inUse(version)) continue; // detached only: the next round applies it again
      await this.resident.free(version);
      this.logger.info({ version: version.toString() }, "adapter version freed");
    }
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
    const home = weightSetKey(adapters.map((a) => this.versionOf(a))); // fails fast on an unknown alias
    const slot = await this.work.foreground(() => this.pool.acquire(home));
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
      decodeRounds: this.rounds.stats,
    };
  }

  /**
   * @internal Every recent decode (callers' and background work's) with its wait for its round, timestamped: tests and
   * the bench check waits with it.
   */
  decodeHolds(): readonly DecodeHold[] {
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
