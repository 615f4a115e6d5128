import type { ChatWrapper, Llama, LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type {
  AdapterInfo,
  AdapterSpec,
  AdapterVersion,
  CacheStats,
  CacheStrategy,
  Conversation,
  Engine,
  EngineFeatures,
  EngineCapacity,
  EngineLogger,
  ModelInfo,
  OpenSessionOptions,
  TokenId,
} from "../../engine/index.js";
import { invocationStart, WeightSet } from "../../engine/index.js";
import { AdapterTable } from "./adapters/AdapterTable.js";
import { ResidentAdapters } from "./adapters/ResidentAdapters.js";
import { renderConversation } from "../../llamaCpp/render.js";
import type { SessionRules } from "./deciding/SessionRules.js";
import { switchStrategy, type SwitchStrategy } from "./deciding/SwitchStrategy.js";
import { BackgroundScheduler } from "./decoding/BackgroundScheduler.js";
import { DecodeRounds, decodesAlone, mayShareRound, type SameRound } from "./decoding/DecodeRounds.js";
import { ContextMaker, type ContextSizes } from "./decoding/EngineContext.js";
import { assertLlamaInternals, switchContextWeights } from "./decoding/internals.js";
import { WorkLog, type DecodeHold } from "./decoding/WorkLog.js";
import type { CacheOptions, LocalEngineOptions } from "./engineOptions.js";
import type { EngineParts } from "./kv/EngineParts.js";
import { Lane } from "./kv/Lane.js";
import { LanePool } from "./kv/LanePool.js";
import { MIN_DECODE_TOKENS } from "./kv/laneSync.js";
import { prefixKeyOf, PrefixStore } from "./kv/PrefixStore.js";
import { firstCuttable } from "./kv/slidingWindow.js";
import { SpillStore } from "./kv/SpillStore.js";
import { LocalEngineSession, type SessionOwner } from "./LocalEngineSession.js";
import { loadModel } from "../../llamaCpp/loadModel.js";

const DEFAULTS = { contextSize: 8192, sequencesPerContext: 4, maxContexts: 2, batchSize: 512, batchInvariant: true };
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
type Sizes = Required<Pick<LocalEngineOptions, keyof typeof DEFAULTS | "swaFullCache">>;

/**
 * The local engine: one frozen base model in this process (llama.cpp through node-llama-cpp) with its
 * resident adapters, the contexts they run in, and the sessions on them.
 */
export class LocalEngine implements Engine, SessionOwner {
  private nextSessionId = 1;
  private disposed = false;
  private readonly sessions = new Map<number, LocalEngineSession>();
  private collecting: Promise<void> = Promise.resolve();
  /** What every session works with: the adapters, the lane pool, the shared prefixes, the scheduler. */
  private readonly parts: EngineParts;
  private readonly adapterTable: AdapterTable;
  private readonly pool: LanePool;
  /** What switches do with the KV cache: chosen once, here. */
  private readonly strategy: SwitchStrategy;
  private readonly scheduler: BackgroundScheduler;
  /** Every decode's wait for its round and its run, with timestamps: what a caller waited for. */
  private readonly workLog = new WorkLog();
  /** Every decode of every context, in rounds of one context and weight set. */
  private readonly rounds: DecodeRounds;
  private readonly contexts: ContextMaker;
  readonly features: EngineFeatures = {
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
    chatWrapper: ChatWrapper,
    resident: ResidentAdapters,
    readonly model: ModelInfo,
    readonly threads: number,
    opts: Sizes,
    readonly cacheStrategy: CacheStrategy,
    spill: SpillStore | undefined,
    cache: Required<Omit<CacheOptions, "spillDir">>,
    private readonly logger: EngineLogger,
    sameRound: SameRound | undefined,
  ) {
    // a round holds what one of node-llama-cpp's batches holds (it makes them at least one token per sequence)
    this.rounds = new DecodeRounds(
      this.workLog,
      Math.max(opts.batchSize, opts.sequencesPerContext),
      sameRound ?? (opts.batchInvariant ? decodesAlone : mayShareRound),
    );
    this.strategy = switchStrategy(cacheStrategy);
    const reuse = cacheStrategy === "reuse";
    this.scheduler = new BackgroundScheduler({
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
      // every session's call may run: sessions under one weight set decode in one batch (decoding/DecodeRounds.ts)
      concurrentCalls: sequences,
      contextSize: opts.contextSize,
    };
    this.adapterTable = new AdapterTable(resident, logger);
    const sizes: ContextSizes = {
      contextSize: opts.contextSize,
      batchSize: opts.batchSize,
      threads,
      swaFullCache: opts.swaFullCache,
      flashAttention: opts.batchInvariant ? false : "auto",
    };
    this.contexts = new ContextMaker(llamaModel, sizes, opts.sequencesPerContext, this.rounds, this.adapterTable);
    this.pool = new LanePool({
      maxContexts: opts.maxContexts,
      sequencesPerContext: opts.sequencesPerContext,
      spill,
      logger,
      contexts: this.contexts,
    });
    this.parts = {
      model: llamaModel,
      chatWrapper,
      adapters: this.adapterTable,
      pool: this.pool,
      prefixes: reuse && cache.sharedPrefixes && spill ? new PrefixStore(spill, logger) : undefined,
      scheduler: this.scheduler,
      batchInvariant: opts.batchInvariant,
    };
  }

  /**
   * Validates the model file (llama.cpp aborts the process on some bad metadata), then loads it once. `planted`
   * (@internal): tests plant careless decode rounds through localTesting.ts, to prove the rule matters.
   */
  static async load(options: LocalEngineOptions, planted: { sameRound?: SameRound } = {}): Promise<LocalEngine> {
    const { llama, llamaModel, header, info, threads, errors, chatWrapper } = await loadModel(options);
    assertLlamaInternals(llamaModel);
    const cache = { ...DEFAULT_CACHE, ...options.cache };
    const engine = new LocalEngine(
      llama,
      llamaModel,
      chatWrapper,
      new ResidentAdapters(llamaModel, header, errors),
      info,
      threads,
      {
        contextSize: Math.min(options.contextSize ?? DEFAULTS.contextSize, llamaModel.trainContextSize),
        sequencesPerContext: options.sequencesPerContext ?? DEFAULTS.sequencesPerContext,
        maxContexts: options.maxContexts ?? DEFAULTS.maxContexts,
        batchSize: options.batchSize ?? DEFAULTS.batchSize,
        swaFullCache: options.swaFullCache ?? options.batchInvariant ?? DEFAULTS.batchInvariant,
        batchInvariant: options.batchInvariant ?? DEFAULTS.batchInvariant,
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

  addAdapter(spec: AdapterSpec): Promise<AdapterInfo> {
    return this.adapterTable.add(spec);
  }

  async refreshAdapter(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const refreshed = await this.adapterTable.refresh(spec);
    await this.collect();
    return refreshed;
  }

  async removeAdapter(alias: string): Promise<AdapterInfo> {
    const info = this.adapterTable.remove(alias);
    await this.collect();
    return info;
  }

  adapter(alias: string): AdapterInfo {
    return this.adapterTable.info(alias);
  }

  adapters(): AdapterInfo[] {
    return this.adapterTable.list();
  }

  residentVersions(): AdapterInfo[] {
    return this.adapterTable.residentVersions();
  }

  /**
   * Frees every version that is neither current for an alias, nor active in an open session, nor held by an
   * idle lane, nor pinned by a switch or a reference under way. Lanes no switch can reach any more (their
   * weights were refreshed or removed) are dropped first.
   */
  collect(): Promise<void> {
    // most calls (every switch makes one) find nothing to free: skip stopping every decode then
    if (this.adapterTable.allCurrent()) return this.collecting;
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
      this.adapterTable.isCurrent(version) ||
      this.adapterTable.isPinned(version) ||
      [...this.sessions.values()].some((s) => holds(s.activeVersions, version)) ||
      this.pool.idleLanes().some((l) => holds(l.weights.versions, version));
    for (const { version } of this.adapterTable.residentVersions()) {
      if (inUse(version)) continue;
      for (const context of this.pool.contexts) await context.detach(version);
      if (inUse(version)) continue; // detached only: the next round applies it again
      await this.adapterTable.free(version);
      this.logger.info({ version: version.toString() }, "adapter version freed");
    }
  }

  /** SessionOwner: a session stopped using some versions. */
  versionsReleased(): void {
    void this.collect();
  }

  /** SessionOwner: a session closed and gave back everything it held. */
  sessionClosed(sessionId: number): void {
    this.sessions.delete(sessionId);
    void this.collect();
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
   * localTesting.ts (beside this file), to prove that each mechanism matters.
   */
  async openSessionWith(
    options: { adapters?: readonly string[] } & Partial<SessionRules>,
  ): Promise<LocalEngineSession> {
    const { adapters = [], ...given } = options;
    const base = this.model.sha256;
    // fails fast on an unknown alias
    const home = WeightSet.of(
      base,
      adapters.map((a) => this.adapterTable.resolve(a)),
    );
    this.scheduler.beginForeground();
    let slot;
    try {
      slot = await this.pool.acquire(home);
    } finally {
      this.scheduler.endForeground();
    }
    // resolved and registered together, after the await: a refresh in between cannot hand out a freed version
    const versions = adapters.map((a) => this.adapterTable.resolve(a));
    const id = this.nextSessionId++;
    const rules: SessionRules = {
      strategy: this.strategy,
      weightsOf: (v) => WeightSet.of(base, v),
      invocationOf: invocationStart,
      prefixKeyOf,
      backgroundWeights: (own) => own,
      cutFloor: firstCuttable,
      promptScope: `session:${id}`,
      ...given,
    };
    const lane = new Lane(id, rules.weightsOf(versions));
    lane.attach(slot);
    const session = new LocalEngineSession(id, this.parts, this, rules, lane);
    this.sessions.set(id, session);
    return session;
  }

  cacheStats(): CacheStats {
    const { batches, ms, yields, lanesStarted, tokens } = this.scheduler.totals;
    return {
      strategy: this.cacheStrategy,
      ...this.pool.stats(),
      evaluatedTokens: { foreground: this.scheduler.foregroundTokens, background: tokens },
      background: { enabled: this.scheduler.enabled, batches, ms: Math.round(ms), yields, lanesStarted },
      sharedPrefixes: this.parts.prefixes?.stats() ?? { enabled: false, entries: 0, bytes: 0, hits: 0, saved: 0 },
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
    return renderConversation(this.llamaModel, this.parts.chatWrapper, conversation).tokens;
  }

  tokenize(text: string): Token[] {
    return this.llamaModel.tokenize(text, false);
  }

  detokenize(tokens: readonly TokenId[]): string {
    return this.llamaModel.detokenize(tokens as readonly Token[], true);
  }

  /**
   * @internal The test oracle's door (localTesting.ts `referenceNextTokenLogProbs`): `fn` gets `count` fresh contexts
   * of one sequence each, with the numerics of the sessions' contexts, the first with `aliases`' weights switched on;
   * the versions stay pinned and the contexts are freed after.
   */
  async withReferenceContexts<T>(
    aliases: readonly string[],
    count: number,
    fn: (sequences: LlamaContextSequence[]) => Promise<T>,
  ): Promise<T> {
    const versions = aliases.map((a) => this.adapterTable.resolve(a));
    const weights = versions.map((v) => this.adapterTable.weight(v));
    this.adapterTable.pin(versions);
    this.scheduler.beginForeground();
    const contexts: LlamaContext[] = [];
    try {
      for (let i = 0; i < count; i++) contexts.push(await this.contexts.createPlain());
      await switchContextWeights(contexts[0]!, weights);
      return await fn(contexts.map((c) => c.getSequence()));
    } finally {
      try {
        for (const c of contexts) await c.dispose();
      } finally {
        if (this.adapterTable.unpin(versions)) void this.collect();
        this.scheduler.endForeground();
      }
    }
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    await this.scheduler.stop();
    await this.collecting;
    this.disposed = true;
    for (const c of this.pool.contexts) await c.dispose();
    this.pool.dispose();
    await this.llamaModel.dispose();
    await this.llama.dispose();
    this.logger.info({ model: this.model.filePath }, "base model freed");
  }
}
