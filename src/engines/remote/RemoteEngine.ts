import { resolve } from "node:path";
import {
  DuplicateAdapterError,
  EngineCapacityError,
  EngineError,
  EngineTimeoutError,
  EngineUnavailableError,
  ModelFileError,
  readAdapterFile,
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
  type EngineCapabilities,
  type EngineCapacity,
  type ModelInfo,
  type OpenSessionOptions,
  type TokenId,
} from "../../engine/index.js";
import { readGgufHeaderAsync, type GgufFile } from "../../gguf/index.js";
import { peftFolderSha256 } from "../../library/peft/index.js";
import { placePeft, type PeftDirs } from "./adapters/peftForm.js";
import { AdapterLostError, type CompletionRequest, type CompletionResult, type EngineAdapter, type EngineFacts, type PreparedAdapter } from "./flavors/Flavor.js";
import { flavorFor, type Flavor } from "./flavors/index.js";
import { EngineHttp } from "./client/EngineHttp.js";
import type { RemoteEngineOptions } from "./options.js";
import { RemoteEngineSession, type RemoteEngineServices } from "./RemoteEngineSession.js";

const DEFAULT_SESSIONS = 64;
/** Checked against the engine's own tokenizer at connect: plain words, digits, punctuation, and the call syntax. */
const TOKENIZER_PROBE = 'Which river flows through Paris? 777 km, 2 seas; naïve café: "quoted" {json: [1, 2]}\n';

interface HeldVersion {
  info: AdapterInfo;
  prepared: PreparedAdapter;
  /** How requests name it, or why the engine no longer serves it (it restarted without it). */
  engine: EngineAdapter | EngineError;
}

/** The engine's address as errors, listings and logs show it: never a user name or password (engine.remote.apiKeyEnv is for those). */
export function engineAddress(url: string): string {
  const u = new URL(url);
  u.username = "";
  u.password = "";
  return u.toString().replace(/\/$/, "");
}

/**
 * The engine interface over a serving engine in another process (llama-server, vLLM, SGLang): adapters are
 * registered with the engine under versioned names (or mapped to the ones it started with), each session's turns
 * are requests under its active adapter, prompts are rendered here by the base model's own chat template and sent
 * as token ids, and the function-calling grammar goes with every request. What differs between engines is in
 * `flavors/`; the sessions, versions and accounting are the same for all.
 */
export class RemoteEngine implements Engine {
  readonly capabilities: EngineCapabilities;
  readonly capacity: EngineCapacity;
  readonly cacheStrategy: CacheStrategy;
  readonly model: ModelInfo;
  private readonly current = new Map<string, AdapterVersion>();
  private readonly held = new Map<string, HeldVersion>();
  /** Versions a switch under way holds; collect leaves them alone. */
  private readonly pinned = new VersionPins();
  private readonly sessions = new Map<number, RemoteEngineSession>();
  private readonly freeSlots: number[];
  private readonly host: RemoteEngineServices;
  /** What raises the session limit on this engine, for EngineCapacityError. */
  private readonly sessionsLimit: string;
  private nextSessionId = 1;
  /** Prompt tokens the engine evaluated for this backend's requests, by its own figures. */
  private evaluatedTokens = 0;
  private collecting: Promise<void> = Promise.resolve();
  /** Set when the engine was unreachable: it may have restarted, so its adapters are checked before the next request. */
  private stale = false;
  private verifying: Promise<void> | undefined;
  private disposed = false;

  private constructor(
    private readonly opts: RemoteEngineOptions,
    private readonly flavor: Flavor,
    private readonly http: EngineHttp,
    private readonly base: GgufFile,
    private readonly facts: EngineFacts,
    private readonly peftDirs: PeftDirs | undefined,
  ) {
    const features = flavor.features;
    const codec = opts.codec;
    const sessions = Math.min(opts.sessions ?? facts.slots ?? DEFAULT_SESSIONS, facts.slots ?? Infinity);
    this.capacity = { sessions, contexts: Math.max(1, Math.min(opts.maxInFlight, sessions)), contextSize: Math.min(opts.contextSize ?? facts.contextSize, facts.contextSize) };
    this.sessionsLimit =
      facts.slots === undefined
        ? "raise engine.remote.sessions"
        : sessions < facts.slots
          ? `raise engine.remote.sessions (up to the engine's ${facts.slots} slots)`
          : `start ${flavor.title} with more slots (it has ${facts.slots}) and raise engine.remote.sessions`;
    this.capabilities = { logProbs: true, runtimeAdapterLoading: features.runtimeAdapterLoading, adapterSets: features.adapterSets, alora: false, grammar: true, cacheStrategies: [features.cacheStrategy] };
    this.cacheStrategy = features.cacheStrategy;
    this.model = { ...codec.model, filePath: `${http.label} (${facts.servedModel}; tokenizer and chat template from ${codec.model.filePath})`, name: facts.servedModel };
    this.freeSlots = features.slots ? Array.from({ length: sessions }, (_, i) => i) : [];
    this.host = {
      codec,
      flavor,
      capacity: this.capacity,
      cacheStrategy: this.cacheStrategy,
      engineLabel: http.label,
      contextLimit:
        this.capacity.contextSize < facts.contextSize ? `raise model.contextSize (the engine allows ${facts.contextSize} tokens a session)` : `${features.contextLimit} (now ${facts.contextSize} tokens a session)`,
      maxLogprobs: features.logProbs === "full" ? codec.vocabularySize : (opts.maxLogprobs ?? 20),
      resolve: (alias) => this.versionOf(alias),
      pin: (versions) => this.pinned.pin(versions),
      unpin: (versions) => void this.pinned.unpin(versions),
      complete: (versions, request, flavorOverride) => this.complete(versions, request, flavorOverride),
      noAdapterSets: () => this.noAdapterSets(),
      versionsReleased: () => void this.collect(),
      closed: (session) => {
        this.sessions.delete(session.id);
        if (session.slot !== undefined) this.freeSlots.push(session.slot);
        void this.collect();
      },
    };
  }

  /** Connects to the engine, checks it serves a model this tokenizer fits, and learns its limits. */
  static async connect(opts: RemoteEngineOptions, flavor: Flavor = flavorFor(opts.flavor, { adapterSha256: opts.adapterSha256 })): Promise<RemoteEngine> {
    const { codec, logger } = opts;
    const http = new EngineHttp({ url: opts.url, label: `${flavor.title} at ${engineAddress(opts.url)}`, timeoutMs: opts.timeoutMs, maxInFlight: opts.maxInFlight, apiKey: opts.apiKey });
    try {
      if (flavor.features.adapterForm === "peft" && !opts.adapterDir) {
        throw new UnsupportedFeatureError(http.label, "GGUF adapters", "it loads PEFT folders: set engine.remote.adapterDir to a folder it can read (and localAdapterDir if this server sees it elsewhere)");
      }
      const facts = await flavor.inspect(http, opts.model);
      const gguf = codec.model.filePath;
      if (facts.vocabularySize !== undefined && facts.vocabularySize !== codec.vocabularySize) {
        throw new ModelFileError(gguf, `its vocabulary has ${codec.vocabularySize} tokens but ${http.label} serves a model with ${facts.vocabularySize}: point model.path at the GGUF of the model the engine serves`);
      }
      const theirs = await flavor.tokenize(http, TOKENIZER_PROBE);
      const ours = codec.tokenize(TOKENIZER_PROBE, true);
      if (theirs && theirs.join(",") !== ours.join(",")) {
        throw new ModelFileError(gguf, `it tokenizes text differently from ${http.label} (${ours.length} tokens here, ${theirs.length} there): point model.path at the GGUF of the model the engine serves`);
      }
      const base = await readGgufHeaderAsync(gguf);
      const local = opts.localAdapterDir ?? opts.adapterDir;
      const engine = new RemoteEngine(opts, flavor, http, base, facts, opts.adapterDir && local ? { engine: opts.adapterDir, local: resolve(local) } : undefined);
      logger.info({ engine: http.label, served: facts.servedModel, sessions: engine.capacity.sessions, contextSize: engine.capacity.contextSize, cache: engine.cacheStrategy, tokenizer: gguf }, "remote engine connected");
      return engine;
    } catch (err) {
      await codec.dispose();
      throw err;
    }
  }

  async addAdapter(spec: AdapterSpec): Promise<AdapterInfo> {
    if (this.current.has(spec.alias)) throw new DuplicateAdapterError(spec.alias);
    const held = await this.hold(spec);
    this.current.set(spec.alias, held.info.version);
    this.opts.logger.info({ alias: spec.alias, sha256: held.info.sha256, scale: spec.scale, engine: handleOf(held) }, "adapter registered with the engine");
    return held.info;
  }

  async refreshAdapter(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const previous = this.adapter(spec.alias);
    const held = await this.hold(spec);
    this.current.set(spec.alias, held.info.version);
    this.opts.logger.info({ alias: spec.alias, from: previous.sha256, to: held.info.sha256, engine: handleOf(held) }, "adapter refreshed");
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
    return this.held.get(this.versionOf(alias).toString())!.info;
  }

  adapters(): AdapterInfo[] {
    return [...this.current.values()].map((v) => this.held.get(v.toString())!.info);
  }

  residentVersions(): AdapterInfo[] {
    return [...this.held.values()].map((h) => h.info);
  }

  private versionOf(alias: string): AdapterVersion {
    const version = this.current.get(alias) ?? this.held.get(alias)?.info.version;
    if (!version) throw new UnknownAdapterError(alias, [...this.current.keys()]);
    return version;
  }

  /**
   * Validates the file against the base, prepares the engine's form of it and registers it (once per version).
   * An engine that loads adapters only at start is asked first what it holds now (it may have restarted).
   */
  private async hold(spec: AdapterSpec): Promise<HeldVersion> {
    const peftDir = this.flavor.features.adapterForm === "peft" && spec.peftDir ? resolve(spec.peftDir) : undefined;
    // the engine loads the manifest's PEFT folder, not the GGUF: its bytes are part of the version
    const { info, header } = await readAdapterFile(spec, this.base, peftDir && (await peftFolderSha256(peftDir)));
    if (info.invocationTokens) throw new UnsupportedFeatureError(this.http.label, "activated LoRA (aLoRA) adapters", "serve it on the local engine (engine.backend: local)");
    const existing = this.held.get(info.id);
    if (existing && !(existing.engine instanceof EngineError)) return existing;
    const prepared: PreparedAdapter = { version: info.version, filePath: info.filePath };
    if (this.flavor.features.adapterForm === "peft") prepared.peft = await placePeft(info, header, this.base, peftDir, this.peftDirs!, this.facts.servedModel);
    if (this.flavor.features.runtimeAdapterLoading) await this.ready();
    else await this.verify();
    const engine = await this.flavor.register(this.http, prepared);
    const held = { info, prepared, engine };
    this.held.set(info.id, held);
    return held;
  }

  private isCurrent(version: AdapterVersion): boolean {
    return [...this.current.values()].some((v) => v.equals(version));
  }

  /** Unregisters the versions nothing holds: not current, not active in a session, not pinned by a switch under way. */
  collect(): Promise<void> {
    this.collecting = this.collecting
      .then(async () => {
        if (this.disposed) return;
        const inUse = (v: AdapterVersion) => this.isCurrent(v) || this.pinned.has(v) || [...this.sessions.values()].some((s) => s.activeVersions.some((a) => a.equals(v)));
        for (const [id, held] of this.held) {
          if (inUse(held.info.version)) continue;
          this.held.delete(id);
          if (held.engine instanceof EngineError) continue;
          await this.flavor.unregister(this.http, held.engine);
          this.opts.logger.info({ version: id, engine: handleOf(held) }, "adapter version unregistered");
        }
      })
      .catch((err) => this.opts.logger.warn({ err: (err as Error).message }, "unregistering unused adapters failed; they stay loaded in the engine"));
    return this.collecting;
  }

  /** Before a request after the engine was unreachable (it may have restarted): the check below. */
  private ready(): Promise<void> {
    return this.stale ? this.verify() : Promise.resolve();
  }

  /**
   * Asks the engine what it holds now and maps every held version again: llama-server's adapter ids and the
   * contents it loaded (a restart may have put other files under them, or the same files in another order),
   * vLLM's and SGLang's runtime-loaded adapters (loaded again). A restarted engine has none of the sessions'
   * caches. A version the engine no longer serves fails only the requests that name it.
   */
  private verify(): Promise<void> {
    this.verifying ??= (async () => {
      try {
        const restarted = await this.flavor.reset(this.http, this.freeSlots[0] ?? 0);
        if (restarted || this.stale) {
          for (const session of this.sessions.values()) session.forgetCache();
        }
        for (const held of this.held.values()) {
          held.engine = await this.flavor.register(this.http, held.prepared).catch((err: unknown) => {
            if (!(err instanceof EngineError) || err instanceof EngineUnavailableError || err instanceof EngineTimeoutError) throw err;
            return err;
          });
        }
        if (restarted || this.stale) this.opts.logger.info({ engine: this.http.label, restarted }, "engine checked again; adapters mapped again");
        this.stale = false;
      } finally {
        this.verifying = undefined;
      }
    })();
    return this.verifying;
  }

  /** The engine's names of `versions` now, or the error of one it does not serve. */
  private engineAdapters(versions: readonly AdapterVersion[]): EngineAdapter[] {
    return versions.map((v) => {
      const engine = this.held.get(v.toString())!.engine;
      if (engine instanceof EngineError) throw engine;
      return engine;
    });
  }

  /**
   * One completion under `versions`, with the recovery above. On a slot engine, a request that does not continue
   * from the slot's cache first checks which adapters the engine holds (a switch's prefill, a new session's
   * first request); one that does continue finds out from the cached-token figure whether the engine still had
   * the slot's state: when it had not (it restarted), the adapters are checked, and the request repeated if it
   * named them by ids that now mean other weights.
   */
  private async complete(versions: readonly AdapterVersion[], request: Omit<CompletionRequest, "adapters">, flavor: Flavor = this.flavor): Promise<CompletionResult> {
    const slots = this.flavor.features.slots;
    if (slots && request.reuse === undefined) await this.verify();
    else await this.ready();
    // every request sent counts, a repeated one too: what the engine evaluated for this backend
    const send = async (req: Omit<CompletionRequest, "adapters">) => {
      const result = await flavor.complete(this.http, { ...req, adapters: this.engineAdapters(versions) });
      this.evaluatedTokens += result.evaluated ?? 0;
      return result;
    };
    let result: CompletionResult;
    try {
      result = await send(request);
    } catch (err) {
      // a request that timed out in this server's own line never reached the engine: nothing to check there
      if (err instanceof EngineUnavailableError || (err instanceof EngineTimeoutError && err.queuedFor === undefined)) this.stale = true;
      if (!(err instanceof AdapterLostError)) throw err;
      this.opts.logger.warn({ engine: this.http.label, detail: err.detail }, "the engine lost an adapter (restarted?); registering again and repeating the request");
      this.stale = true;
      await this.ready();
      return send(request);
    }
    const expected = request.reuse === undefined ? 0 : Math.min(request.reuse, request.prompt.length - 1);
    if (slots && result.cached !== undefined && result.cached < expected) {
      const before = this.engineAdapters(versions).map((a) => a.handle);
      this.opts.logger.warn({ engine: this.http.label, slot: request.slot, cached: result.cached, expected }, "the engine no longer had a session's cache (restarted?); checking its adapters");
      await this.verify();
      const now = this.engineAdapters(versions).map((a) => a.handle);
      if (now.some((h, i) => h !== before[i])) return send({ ...request, reuse: undefined });
    }
    return result;
  }

  async openSession(options: OpenSessionOptions = {}): Promise<RemoteEngineSession> {
    return this.openSessionWith({ adapters: options.adapters ?? (options.adapter ? [options.adapter] : []) });
  }

  /**
   * @internal Tests plant a flavor that selects adapters through a path that lets the engine's cache cross them
   * (src/engines/remote/testing.ts), to prove the conformance suite catches it.
   */
  async openSessionWith(options: { adapters?: readonly string[]; flavor?: Flavor }): Promise<RemoteEngineSession> {
    const aliases = options.adapters ?? [];
    if (aliases.length > 1 && !this.capabilities.adapterSets) throw this.noAdapterSets();
    if (options.flavor) await options.flavor.reset(this.http, this.freeSlots[0] ?? 0);
    // from here to the session's registration nothing awaits: two opens cannot take the same slot
    const versions = aliases.map((a) => this.versionOf(a));
    if (this.sessions.size >= this.capacity.sessions) throw new EngineCapacityError(this.capacity.sessions, this.sessionsLimit);
    const slot = this.flavor.features.slots ? this.freeSlots.shift() : undefined;
    const session = new RemoteEngineSession(this.nextSessionId++, this.host, slot, versions, options.flavor);
    this.sessions.set(session.id, session);
    return session;
  }

  /** The error for a set of adapters on an engine that applies one per request. */
  noAdapterSets(): UnsupportedFeatureError {
    return new UnsupportedFeatureError(this.http.label, "several adapters applied together (the static policy)", "use one adapter at a time, or serve through llama-server");
  }

  cacheStats(): CacheStats {
    // the engine evaluates only when a request asks it to: there is no work ahead of time, and its own prefix cache is its business
    return {
      strategy: this.cacheStrategy,
      contexts: 1,
      sequences: this.sessions.size,
      idleLanes: 0,
      spilledLanes: 0,
      spilledBytes: 0,
      evictions: { spilled: 0, dropped: 0 },
      evaluatedTokens: { foreground: this.evaluatedTokens, background: 0 },
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
    // an engine that loaded them at runtime for this server keeps them otherwise, each taking an adapter slot;
    // at once, so a hung engine holds shutdown about timeoutMs (each request's bound), not that per adapter
    if (this.flavor.features.runtimeAdapterLoading) {
      await Promise.all(
        [...this.held].map(async ([id, held]) => {
          if (held.engine instanceof EngineError) return;
          await this.flavor
            .unregister(this.http, held.engine)
            .then(() => this.opts.logger.info({ version: id, engine: handleOf(held) }, "adapter version unregistered"))
            .catch((err: unknown) => this.opts.logger.warn({ version: id, err: (err as Error).message }, "unregistering an adapter at shutdown failed; it stays loaded in the engine"));
        }),
      );
      this.held.clear();
    }
    await this.opts.codec.dispose();
    this.opts.logger.info({ engine: this.http.label }, "remote engine disconnected");
  }
}

const handleOf = (held: HeldVersion) => (held.engine instanceof EngineError ? `(${held.engine.code})` : String(held.engine.handle));
