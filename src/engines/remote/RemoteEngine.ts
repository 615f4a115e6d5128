import { resolve } from "node:path";
import {
  DuplicateAdapterError,
  EngineCapacityError,
  ensureActivatedAlone,
  UnknownAdapterError,
  UnsupportedFeatureError,
  VersionPins,
  type AdapterInfo,
  type AdapterSpec,
  type AdapterVersion,
  type CacheStats,
  type CacheStrategy,
  type Conversation,
  type Engine,
  type EngineFeatures,
  type EngineCapacity,
  type ModelInfo,
  type OpenSessionOptions,
  type TokenId,
} from "../../engine/index.js";
import { readGgufHeaderAsync, type GgufFile } from "../../gguf/index.js";
import type { PeftDirs } from "./adapters/peftForm.js";
import { handleOf, RegisteredVersions } from "./adapters/RegisteredVersions.js";
import { EngineHttp, engineAddress } from "./client/EngineHttp.js";
import { Completions } from "./completions/Completions.js";
import { checkServedModel } from "./connect/checkServedModel.js";
import { engineProfile } from "./connect/engineProfile.js";
import type { EngineFacts } from "./flavors/Flavor.js";
import { flavorFor, type Flavor } from "./flavors/index.js";
import { DEFAULT_MAX_RESPONSE_BYTES, type RemoteEngineOptions } from "./remoteEngineOptions.js";
import type { RemoteEngineServices } from "./session/RemoteEngineServices.js";
import { RemoteEngineSession } from "./session/RemoteEngineSession.js";

/**
 * The engine interface over a serving engine in another process (llama-server, vLLM, SGLang): adapters are
 * registered with the engine under versioned names (or mapped to the ones it started with), each session's turns
 * are requests under its active adapter, prompts are rendered here by the base model's own chat template and sent
 * as token ids, and the function-calling grammar goes with every request. What differs between engines is in
 * `flavors/`; the sessions, versions and accounting are the same for all. Here: the library's aliases and the
 * open sessions; the versions as the engine names them are in `RegisteredVersions`, requests in `Completions`.
 */
export class RemoteEngine implements Engine {
  readonly features: EngineFeatures;
  readonly capacity: EngineCapacity;
  readonly cacheStrategy: CacheStrategy;
  readonly model: ModelInfo;
  private readonly current = new Map<string, AdapterVersion>();
  private readonly registered: RegisteredVersions;
  /** Versions a switch under way holds; collect leaves them alone. */
  private readonly pinned = new VersionPins();
  private readonly completions: Completions;
  private readonly sessions = new Map<number, RemoteEngineSession>();
  private readonly freeSlots: number[];
  private readonly host: RemoteEngineServices;
  /** What raises the session limit on this engine, for EngineCapacityError. */
  private readonly sessionsLimit: string;
  private nextSessionId = 1;
  private collecting: Promise<void> = Promise.resolve();
  private disposed = false;

  private constructor(
    private readonly opts: RemoteEngineOptions,
    private readonly flavor: Flavor,
    private readonly http: EngineHttp,
    base: GgufFile,
    facts: EngineFacts,
    peftDirs: PeftDirs | undefined,
  ) {
    const profile = engineProfile(opts, flavor, facts, http.label);
    this.capacity = profile.capacity;
    this.features = profile.features;
    this.cacheStrategy = profile.cacheStrategy;
    this.model = profile.model;
    this.sessionsLimit = profile.sessionsLimit;
    this.freeSlots = flavor.features.slots ? Array.from({ length: this.capacity.sessions }, (_, i) => i) : [];
    this.registered = new RegisteredVersions({
      flavor,
      http,
      base,
      servedModel: facts.servedModel,
      peftDirs,
      logger: opts.logger,
      freeSlot: () => this.freeSlots[0] ?? 0,
      cachesLost: () => {
        for (const session of this.sessions.values()) session.forgetCache();
      },
    });
    this.completions = new Completions(flavor, http, this.registered, opts.logger);
    this.host = {
      codec: opts.codec,
      flavor,
      capacity: this.capacity,
      cacheStrategy: this.cacheStrategy,
      engineLabel: http.label,
      contextLimit: profile.contextLimit,
      maxLogprobs: profile.maxLogprobs,
      resolve: (alias) => this.versionOf(alias),
      pin: (versions) => this.pinned.pin(versions),
      unpin: (versions) => void this.pinned.unpin(versions),
      complete: (versions, request, flavorOverride) => this.completions.complete(versions, request, flavorOverride),
      noAdapterSets: () => this.noAdapterSets(),
      invocationOf: (version) => this.registered.get(version).invocationTokens,
      ensureApplicable: (versions) => this.ensureApplicable(versions),
      versionsReleased: () => void this.collect(),
      closed: (sessionId, slot) => {
        this.sessions.delete(sessionId);
        if (slot !== undefined) this.freeSlots.push(slot);
        void this.collect();
      },
    };
  }

  /** Connects to the engine, checks it serves a model this tokenizer fits, and learns its limits. */
  static async connect(
    opts: RemoteEngineOptions,
    flavor: Flavor = flavorFor(opts.flavor, { adapterSha256: opts.adapterSha256 }),
  ): Promise<RemoteEngine> {
    const { codec, logger } = opts;
    const http = new EngineHttp({
      url: opts.url,
      label: `${flavor.title} at ${engineAddress(opts.url)}`,
      timeoutMs: opts.timeoutMs,
      maxInFlight: opts.maxInFlight,
      maxResponseBytes: opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
      apiKey: opts.apiKey,
    });
    try {
      const facts = await checkServedModel(opts, flavor, http);
      const gguf = codec.model.filePath;
      const base = await readGgufHeaderAsync(gguf);
      const local = opts.localAdapterDir ?? opts.adapterDir;
      const engine = new RemoteEngine(
        opts,
        flavor,
        http,
        base,
        facts,
        opts.adapterDir && local ? { engine: opts.adapterDir, local: resolve(local) } : undefined,
      );
      logger.info(
        {
          engine: http.label,
          served: facts.servedModel,
          sessions: engine.capacity.sessions,
          contextSize: engine.capacity.contextSize,
          cache: engine.cacheStrategy,
          tokenizer: gguf,
        },
        "remote engine connected",
      );
      return engine;
    } catch (err) {
      await codec.dispose();
      throw err;
    }
  }

  async addAdapter(spec: AdapterSpec): Promise<AdapterInfo> {
    if (this.current.has(spec.alias)) throw new DuplicateAdapterError(spec.alias);
    const held = await this.registered.register(spec);
    await this.registered.ensureBaseStandIn(spec);
    this.current.set(spec.alias, held.info.version);
    this.opts.logger.info(
      { alias: spec.alias, sha256: held.info.sha256, scale: spec.scale, engine: handleOf(held) },
      "adapter registered with the engine",
    );
    return held.info;
  }

  async refreshAdapter(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const previous = this.adapter(spec.alias);
    const held = await this.registered.register(spec);
    this.current.set(spec.alias, held.info.version);
    this.opts.logger.info(
      { alias: spec.alias, from: previous.sha256, to: held.info.sha256, engine: handleOf(held) },
      "adapter refreshed",
    );
    await this.collect();
    return { previous, current: held.info };
  }

  async removeAdapter(alias: string): Promise<AdapterInfo> {
    const info = this.adapter(alias);
    this.current.delete(alias);
    await this.collect();
    return info;
  }

  adapter(alias: string): AdapterInfo {
    return this.registered.get(this.versionOf(alias));
  }

  adapters(): AdapterInfo[] {
    return [...this.current.values()].map((v) => this.registered.get(v));
  }

  residentVersions(): AdapterInfo[] {
    return this.registered.list();
  }

  /** An alias's current version (a registered version's own id is accepted too). */
  private versionOf(alias: string): AdapterVersion {
    const version = this.current.get(alias) ?? this.registered.find(alias);
    if (!version) throw new UnknownAdapterError(alias, [...this.current.keys()]);
    return version;
  }

  private isCurrent(version: AdapterVersion): boolean {
    return [...this.current.values()].some((v) => v.equals(version));
  }

  /** Unregisters the versions nothing holds: not current, not active in a session, not pinned by a switch under way. */
  collect(): Promise<void> {
    this.collecting = this.collecting
      .then(async () => {
        if (this.disposed) return;
        const inUse = (v: AdapterVersion) =>
          this.isCurrent(v) ||
          this.pinned.has(v) ||
          [...this.sessions.values()].some((s) => s.activeVersions.some((a) => a.equals(v)));
        await this.registered.unregisterUnused(inUse);
      })
      .catch((err) =>
        this.opts.logger.warn(
          { err: (err as Error).message },
          "unregistering unused adapters failed; they stay loaded in the engine",
        ),
      );
    return this.collecting;
  }

  async openSession(options: OpenSessionOptions = {}): Promise<RemoteEngineSession> {
    return this.openSessionWith({ adapters: options.adapters ?? (options.adapter ? [options.adapter] : []) });
  }

  /**
   * @internal Tests plant a flavor that selects adapters through a path that lets the engine's cache cross them
   * (src/engines/remote/remoteTesting.ts), to prove the conformance suite catches it.
   */
  async openSessionWith(options: { adapters?: readonly string[]; flavor?: Flavor }): Promise<RemoteEngineSession> {
    const aliases = options.adapters ?? [];
    if (aliases.length > 1 && !this.features.adapterSets) throw this.noAdapterSets();
    if (options.flavor) await options.flavor.reset(this.http, this.freeSlots[0] ?? 0);
    // from here to the session's registration nothing awaits: two opens cannot take the same slot
    const versions = aliases.map((a) => this.versionOf(a));
    this.ensureApplicable(versions);
    if (this.sessions.size >= this.capacity.sessions)
      throw new EngineCapacityError(this.capacity.sessions, this.sessionsLimit);
    const slot = this.flavor.features.slots ? this.freeSlots.shift() : undefined;
    const session = new RemoteEngineSession(this.nextSessionId++, this.host, slot, versions, options.flavor);
    this.sessions.set(session.id, session);
    return session;
  }

  /** An activated LoRA applies alone (ensureActivatedAlone). */
  private ensureApplicable(versions: readonly AdapterVersion[]): void {
    ensureActivatedAlone(versions, (v) => this.registered.get(v).invocationTokens);
  }

  /** The error for a set of adapters on an engine that applies one per request. */
  noAdapterSets(): UnsupportedFeatureError {
    return new UnsupportedFeatureError(
      this.http.label,
      "several adapters applied together (the static policy)",
      "use one adapter at a time, or serve through llama-server",
    );
  }

  cacheStats(): CacheStats {
    // the engine evaluates only when a request asks it to: there is no work ahead of time, and its own prefix cache is
    // its business
    return {
      strategy: this.cacheStrategy,
      contexts: 1,
      sequences: this.sessions.size,
      idleLanes: 0,
      spilledLanes: 0,
      spilledBytes: 0,
      evictions: { spilled: 0, dropped: 0 },
      evaluatedTokens: { foreground: this.completions.evaluatedTokens, background: 0 },
      background: { enabled: false, batches: 0, ms: 0, yields: 0, lanesStarted: 0 },
      sharedPrefixes: { enabled: false, entries: 0, bytes: 0, hits: 0, saved: 0 },
    };
  }

  renderTokens(conversation: Conversation): TokenId[] {
    return this.opts.codec.renderTokens(conversation);
  }

  tokenize(text: string): TokenId[] {
    return this.opts.codec.tokenize(text, false);
  }

  detokenize(tokens: readonly TokenId[]): string {
    return this.opts.codec.detokenize(tokens, true);
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    for (const session of [...this.sessions.values()]) await session.close();
    await this.collecting;
    this.disposed = true;
    await this.registered.unregisterAll();
    await this.opts.codec.dispose();
    this.opts.logger.info({ engine: this.http.label }, "remote engine disconnected");
  }
}
