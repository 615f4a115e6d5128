import { resolveChatWrapper, type ChatWrapper, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { ResidentAdapters } from "../adapters/ResidentAdapters.js";
import type { CacheReplay } from "../cache/DecodeLog.js";
import { Lane } from "../cache/Lane.js";
import { laneKey } from "../cache/laneKey.js";
import { LanePool, type PoolStats } from "../cache/LanePool.js";
import { SpillStore } from "../cache/SpillStore.js";
import { functionCallProblem, wrapperFacts } from "../chat/functionCalls.js";
import { renderConversation } from "../chat/render.js";
import { EngineContext } from "../context/EngineContext.js";
import { DuplicateAdapterError, ModelFileError, NoFunctionCallsError, UnknownAdapterError } from "../../src/engine/errors.js";
import { sha256File } from "../gguf/contentHash.js";
import { GgufFormatError, metaString, readGgufHeaderAsync, type GgufFile } from "../gguf/reader.js";
import { baseModelProblems } from "../gguf/validate.js";
import { assertLlamaInternals, setContextAdapters, type AdapterWeight } from "../llama/internals.js";
import { probeModelInChild } from "../llama/probe.js";
import { startLlama } from "../llama/runtime.js";
import type { EngineLogger } from "../../src/engine/index.js";
import { EngineSession, toLogProbs, type LaneKeyOf, type LogProbs, type SessionHost, type SwitchCachePolicy } from "../session/EngineSession.js";
import type { AdapterInfo, AdapterSpec, CacheStrategy, Conversation, ModelInfo } from "../../src/engine/index.js";
import type { CacheOptions, LocalEngineOptions as EngineOptions } from "./options.js";

const DEFAULTS = { contextSize: 8192, sequencesPerContext: 4, maxContexts: 2, batchSize: 512 };
const DEFAULT_CACHE: Required<Omit<CacheOptions, "spillDir">> & Pick<CacheOptions, "spillDir"> = { strategy: "reuse", spillBytes: 512 * 1024 * 1024 };

/**
 * One frozen base model with its resident adapters, the contexts they run in, and the sessions on them.
 * The only entry point the rest of weact-mcp uses to reach llama.cpp.
 */
export class Engine {
  private nextSessionId = 1;
  private readonly host: SessionHost;
  private disposed = false;
  /** The library as the engine sees it: each alias's current version. */
  private readonly current = new Map<string, string>();
  private readonly sessions = new Set<EngineSession>();
  private collecting: Promise<void> = Promise.resolve();
  private readonly pool: LanePool;

  private constructor(
    private readonly llama: Llama,
    private readonly llamaModel: LlamaModel,
    private readonly resident: ResidentAdapters,
    readonly model: ModelInfo,
    readonly threads: number,
    private readonly opts: Required<Pick<EngineOptions, "contextSize" | "sequencesPerContext" | "maxContexts" | "batchSize">>,
    /** What switches do with the KV cache. */
    readonly cacheStrategy: CacheStrategy,
    spill: SpillStore | undefined,
    private readonly logger: EngineLogger,
  ) {
    const chatWrapper: ChatWrapper = resolveChatWrapper(llamaModel);
    this.pool = new LanePool({
      maxContexts: opts.maxContexts,
      sequencesPerContext: opts.sequencesPerContext,
      spill,
      logger,
      createContext: async () => {
        const context = await this.llamaModel.createContext({ ...this.contextOptions(), sequences: this.opts.sequencesPerContext });
        assertLlamaInternals(this.llamaModel, context);
        return new EngineContext(context);
      },
    });
    this.host = {
      model: llamaModel,
      chatWrapper,
      pool: this.pool,
      resolve: (alias) => this.versionOf(alias),
      weightOf: (version) => resident.weight(version),
      pin: (versions) => this.pin(versions),
      unpin: (versions) => this.unpin(versions),
      versionsReleased: () => void this.collect(),
      closed: (session) => {
        this.sessions.delete(session);
        void this.collect();
      },
    };
  }

  /** Validates the model file (llama.cpp aborts the process on some bad metadata), then loads it once. */
  static async load(options: EngineOptions): Promise<Engine> {
    const logger = options.logger;
    let header: GgufFile;
    try {
      header = await readGgufHeaderAsync(options.modelPath);
    } catch (err) {
      if (err instanceof GgufFormatError) throw new ModelFileError(options.modelPath, err.reason);
      throw err;
    }
    const problems = baseModelProblems(header);
    if (problems.length) throw new ModelFileError(options.modelPath, problems.join("; "));
    if (options.probe ?? true) {
      const probe = await probeModelInChild(options.modelPath);
      if (!probe.ok) throw new ModelFileError(options.modelPath, probe.reason);
    }

    const { llama, threads, errors } = await startLlama({ gpu: options.gpu ?? "auto", threads: options.threads, logger });
    let llamaModel: LlamaModel;
    const mark = errors.mark();
    try {
      llamaModel = await llama.loadModel({ modelPath: options.modelPath, gpuLayers: options.gpuLayers ?? "auto" });
    } catch (err) {
      await llama.dispose();
      const detail = errors.since(mark);
      throw new ModelFileError(options.modelPath, `llama.cpp could not load it: ${(err as Error).message}${detail ? ` (${detail})` : ""}`);
    }
    assertLlamaInternals(llamaModel);
    const chatWrapper = resolveChatWrapper(llamaModel);
    const callProblem = functionCallProblem(wrapperFacts(chatWrapper));
    if (callProblem) {
      await llamaModel.dispose();
      await llama.dispose();
      throw new NoFunctionCallsError(options.modelPath, chatWrapper.wrapperName, callProblem);
    }
    const info: ModelInfo = {
      filePath: options.modelPath,
      sha256: await sha256File(options.modelPath),
      architecture: metaString(header, "general.architecture")!,
      name: metaString(header, "general.name"),
      trainContextSize: llamaModel.trainContextSize,
      sizeBytes: header.fileSize,
      chatWrapper: chatWrapper.wrapperName,
    };
    const cache = { ...DEFAULT_CACHE, ...options.cache };
    const engine = new Engine(
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
      },
      cache.strategy,
      cache.strategy === "reuse" && cache.spillDir !== null ? SpillStore.open(cache.spillDir, cache.spillBytes, info.sha256.slice(0, 16)) : undefined,
      logger,
    );
    logger.info({ model: info.filePath, architecture: info.architecture, chatWrapper: info.chatWrapper, gpu: llama.gpu, threads, cache: cache.strategy }, "base model loaded");
    return engine;
  }

  /** Validates an adapter against the base model, then loads it resident (once, shared by every context). */
  async addAdapter(spec: AdapterSpec): Promise<AdapterInfo> {
    if (this.current.has(spec.alias)) throw new DuplicateAdapterError(spec.alias);
    const info = await this.resident.load(spec);
    this.current.set(spec.alias, info.id);
    this.logger.info({ alias: info.alias, sha256: info.sha256, rank: info.rank, scale: info.scale }, "adapter resident");
    return info;
  }

  /**
   * Points an alias at new bytes (or a new scale) atomically: new loads get the new version, sessions that
   * have the old one active keep it until they release it, and then its memory is freed.
   */
  async refreshAdapter(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const previous = this.adapter(spec.alias);
    const info = await this.resident.load(spec);
    this.current.set(spec.alias, info.id);
    this.logger.info({ alias: spec.alias, from: previous.sha256, to: info.sha256, scale: info.scale }, "adapter refreshed");
    await this.collect();
    return { previous, current: info };
  }

  /** Takes an alias out of the library; sessions using it keep it until they release it, then it is freed. */
  async removeAdapter(alias: string): Promise<AdapterInfo> {
    const info = this.adapter(alias);
    this.current.delete(alias);
    this.logger.info({ alias }, "adapter removed from the library");
    await this.collect();
    return info;
  }

  /** The current version of an alias. */
  adapter(alias: string): AdapterInfo {
    return this.resident.get(this.versionOf(alias));
  }

  /** The library: each alias's current version. */
  adapters(): AdapterInfo[] {
    return [...this.current.values()].map((id) => this.resident.get(id));
  }

  /** Every version in memory, current or still in use by a session. */
  residentVersions(): AdapterInfo[] {
    return this.resident.list();
  }

  /** The version is some alias's current one. */
  private isCurrent(version: string): boolean {
    return [...this.current.values()].includes(version);
  }

  private versionOf(alias: string): string {
    const id = this.current.get(alias) ?? (this.resident.has(alias) ? alias : undefined);
    if (!id) throw new UnknownAdapterError(alias, [...this.current.keys()]);
    return id;
  }

  /**
   * Frees every version that is neither current for an alias, nor active in an open session, nor held by an
   * idle lane, nor pinned by a switch or a reference under way. Lanes no switch can reach any more (their
   * weights were refreshed or removed) are dropped first.
   */
  private collect(): Promise<void> {
    // most calls (every switch makes one) find nothing to free: skip taking every context lock then
    if (this.resident.list().every((v) => this.isCurrent(v.id))) return this.collecting;
    this.collecting = this.collecting
      .then(() =>
        // Every context lock is held while deciding and freeing: no evaluation can apply a version in between.
        this.withAllContextLocks(async () => {
          if (this.disposed) return;
          for (const session of this.sessions) await session.dropUnreachableLanes();
          // asked again for each version, after the awaits: a refresh back to the same bytes makes a version current again
          const inUse = (id: string) =>
            this.isCurrent(id) ||
            this.pinned.has(id) ||
            [...this.sessions].some((s) => s.activeVersions.includes(id)) ||
            this.pool.idleLanes().some((l) => l.versions.includes(id));
          for (const version of this.resident.list()) {
            if (inUse(version.id)) continue;
            for (const context of this.pool.contexts) await context.detach(version.id);
            if (inUse(version.id)) continue; // detached only: the next evaluation applies it again
            await this.resident.free(version.id);
            this.logger.info({ version: version.id }, "adapter version freed");
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
  private readonly pinned = new Map<string, number>();

  private pin(versions: readonly string[]): void {
    for (const v of versions) this.pinned.set(v, (this.pinned.get(v) ?? 0) + 1);
  }

  private unpin(versions: readonly string[]): void {
    for (const v of versions) {
      const n = (this.pinned.get(v) ?? 1) - 1;
      if (n > 0) this.pinned.set(v, n);
      else this.pinned.delete(v);
    }
    if (versions.some((v) => !this.pinned.has(v) && !this.isCurrent(v))) void this.collect();
  }

  /** How many sessions the engine can hold at once (each holds a sequence), and over how many contexts. */
  get capacity(): { sessions: number; contexts: number } {
    return { sessions: this.opts.maxContexts * this.opts.sequencesPerContext, contexts: this.opts.maxContexts };
  }

  /** A new session with an empty cache, starting on `adapter`, or on several `adapters` at once (default: the base). */
  async openSession(options: { adapter?: string | null; adapters?: readonly string[] } = {}): Promise<EngineSession> {
    return this.openSessionWith(this.cacheStrategy, options.adapters ?? (options.adapter ? [options.adapter] : []));
  }

  /**
   * @internal Tests reach "keep-stale" and careless lane keys through native/testing.ts, to prove that the
   * rebuild and the exact keys matter.
   */
  async openSessionWith(cachePolicy: SwitchCachePolicy, adapters: readonly string[] = [], keyOf: LaneKeyOf = (versions) => this.laneKey(versions)): Promise<EngineSession> {
    for (const a of adapters) this.versionOf(a); // fail fast on an unknown alias
    const slot = await this.pool.acquire();
    // resolved and registered together, after the await: a refresh in between cannot hand out a freed version
    const versions = adapters.map((a) => this.versionOf(a));
    const id = this.nextSessionId++;
    const lane = new Lane(id, keyOf(versions), versions);
    lane.attach(slot);
    const session = new EngineSession(id, this.host, cachePolicy, keyOf, lane);
    this.sessions.add(session);
    return session;
  }

  /** A lane's identity: the base model and the exact adapter versions (content hash and scale), order-free. */
  private laneKey(versions: readonly string[]): string {
    return laneKey(this.model.sha256, versions);
  }

  /** Sequences, idle and spilled lanes, evictions: what the cache is doing. */
  cacheStats(): PoolStats & { strategy: CacheStrategy } {
    return { strategy: this.cacheStrategy, ...this.pool.stats() };
  }

  /** Tokens of the rendered conversation, including the assistant turn's opening. */
  renderTokens(conversation: Conversation): Token[] {
    return renderConversation(this.llamaModel, this.host.chatWrapper, conversation).tokens;
  }

  /** Tokens of plain text, e.g. to measure training data. */
  tokenize(text: string): Token[] {
    return this.llamaModel.tokenize(text, false);
  }

  detokenize(tokens: readonly Token[]): string {
    return this.llamaModel.detokenize(tokens, true);
  }

  /**
   * The reference for cache correctness: a fresh context with `alias` (or the base) applied from the start,
   * evaluating `tokens` in the same batch split as a session: the decodes of `replay` (a session's
   * `cacheReplay()`) if given, else all but the last token in one call; then the rest, then the last.
   */
  async referenceNextTokenLogProbs(alias: string | null | readonly string[], tokens: readonly Token[], replay?: CacheReplay): Promise<LogProbs> {
    const aliases = alias === null ? [] : typeof alias === "string" ? [alias] : alias;
    const versions = aliases.map((a) => this.versionOf(a));
    const weights: AdapterWeight[] = versions.map((v) => this.resident.weight(v));
    this.pin(versions);
    const context = await this.llamaModel.createContext({ ...this.contextOptions(), sequences: 1 }).catch((err) => {
      this.unpin(versions);
      throw err;
    });
    try {
      await setContextAdapters(context, weights);
      const sequence = context.getSequence();
      const erase = async (from: number) => {
        if (sequence.nextTokenIndex > from) await sequence.eraseContextTokenRanges([{ start: from, end: sequence.nextTokenIndex }]);
      };
      for (const d of replay?.decodes ?? []) {
        if (d.start > sequence.nextTokenIndex) throw new Error(`the replay has a gap before position ${d.start}`);
        await erase(d.start);
        await sequence.evaluateWithoutGeneratingNewTokens([...d.tokens]);
      }
      await erase(replay?.length ?? 0);
      const rest = tokens.slice(sequence.nextTokenIndex, -1);
      if (sequence.contextTokens.some((t, i) => t !== tokens[i])) throw new Error("the replayed cache is not a prefix of the reference tokens");
      if (rest.length) await sequence.evaluateWithoutGeneratingNewTokens(rest);
      const [result] = await sequence.controlledEvaluate([[tokens.at(-1)!, { generateNext: { probabilities: true } }]]);
      return toLogProbs(result?.next?.probabilities);
    } finally {
      await context.dispose();
      this.unpin(versions);
    }
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
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
    return { contextSize: this.opts.contextSize, batchSize: this.opts.batchSize, threads: this.threads };
  }

}
