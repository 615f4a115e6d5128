import { resolve } from "node:path";
import {
  EngineError,
  EngineTimeoutError,
  EngineUnavailableError,
  readAdapterFile,
  UnsupportedFeatureError,
  type AdapterInfo,
  type AdapterSpec,
  type AdapterVersion,
  type EngineLogger,
} from "../../../engine/index.js";
import type { GgufFile } from "../../../gguf/index.js";
import { peftFolderSha256 } from "../../../library/peft/index.js";
import type { EngineHttp } from "../client/EngineHttp.js";
import type { EngineAdapter, Flavor, PreparedAdapter } from "../flavors/Flavor.js";
import { placePeft, type PeftDirs } from "./peftForm.js";

export interface RegisteredVersion {
  info: AdapterInfo;
  prepared: PreparedAdapter;
  /** How requests name it, or why the engine no longer serves it (it restarted without it). */
  engine: EngineAdapter | EngineError;
}

/** How logs name a version in the engine: its handle, or the code of the error it has there. */
export const handleOf = (held: RegisteredVersion) =>
  held.engine instanceof EngineError ? `(${held.engine.code})` : String(held.engine.handle);

export interface RegisteredVersionsOptions {
  flavor: Flavor;
  http: EngineHttp;
  /** The base model's header: adapters are checked against it. */
  base: GgufFile;
  servedModel: string;
  peftDirs: PeftDirs | undefined;
  logger: EngineLogger;
  /** A slot no session holds, for a check that needs one. */
  freeSlot(): number;
  /** The engine may have lost every session's cache (it restarted, or was unreachable). */
  cachesLost(): void;
}

/**
 * Adapter versions registered with the engine (once per version), by the names it serves them under. The engine
 * can restart under this server: after it was unreachable, or when a request finds an adapter or a cache gone,
 * every version is mapped again (`verify`) before the next request names one.
 */
export class RegisteredVersions {
  private readonly held = new Map<string, RegisteredVersion>();
  /**
   * Set when the engine was unreachable: it may have restarted, so its adapters are checked before the next request.
   */
  private stale = false;
  private verifying: Promise<void> | undefined;
  /** What requests on the base name where the flavor wants one (baseAsZeroAdapter): no version of the library. */
  private baseStandIn: RegisteredVersion | undefined;

  constructor(private readonly opts: RegisteredVersionsOptions) {}

  get(version: AdapterVersion): AdapterInfo {
    return this.held.get(version.toString())!.info;
  }

  /** A registered version by its id (alias, content hash, scale). */
  find(id: string): AdapterVersion | undefined {
    return this.held.get(id)?.info.version;
  }

  list(): AdapterInfo[] {
    return [...this.held.values()].map((h) => h.info);
  }

  /**
   * Validates the file against the base, prepares the engine's form of it and registers it (once per version).
   * An engine that loads adapters only at start is asked first what it holds now (it may have restarted).
   */
  async register(spec: AdapterSpec): Promise<RegisteredVersion> {
    const { flavor, http, base } = this.opts;
    const peftDir = flavor.features.adapterForm === "peft" && spec.peftDir ? resolve(spec.peftDir) : undefined;
    // the engine loads the manifest's PEFT folder, not the GGUF: its bytes are part of the version
    const { info, header } = await readAdapterFile(spec, base, peftDir && (await peftFolderSha256(peftDir)));
    // mainline vLLM and SGLang apply an adapter to every token of a request
    if (info.invocationTokens && !flavor.features.alora)
      throw new UnsupportedFeatureError(
        http.label,
        `activated LoRA (aLoRA) adapters ("${spec.alias}" carries adapter.alora.invocation_tokens): served here it would apply to every token of the prompt, not from its invocation on`,
        "serve this library on the local engine (engine.backend: local) or on llama-server (engine.remote.flavor: llama-server), which apply it from its invocation on and keep the base's cache before it",
      );
    const existing = this.held.get(info.id);
    if (existing && !(existing.engine instanceof EngineError)) return existing;
    const prepared: PreparedAdapter = { version: info.version, filePath: info.filePath };
    if (flavor.features.adapterForm === "peft")
      prepared.peft = await placePeft(info, header, base, peftDir, this.opts.peftDirs!, this.opts.servedModel);
    if (flavor.features.runtimeAdapterLoading) await this.ready();
    else await this.verify();
    const engine = await flavor.register(http, prepared);
    const held = { info, prepared, engine };
    this.held.set(info.id, held);
    return held;
  }

  /**
   * Where the flavor runs the base through an adapter scaled by 0 (baseAsZeroAdapter), registers one from `spec` (an
   * adapter of the library) once: its delta is exactly zero, so the base's figures are unchanged.
   */
  async ensureBaseStandIn(spec: AdapterSpec): Promise<void> {
    if (!this.opts.flavor.features.baseAsZeroAdapter || this.baseStandIn) return;
    const held = await this.register({ ...spec, alias: "base", scale: 0, peftDir: undefined });
    // not a version of the library: never collected, mapped again with the others after a restart
    this.held.delete(held.info.id);
    this.baseStandIn = held;
  }

  /** Unregisters the versions `inUse` says nothing holds. */
  async unregisterUnused(inUse: (version: AdapterVersion) => boolean): Promise<void> {
    for (const [id, held] of this.held) {
      if (inUse(held.info.version)) continue;
      this.held.delete(id);
      if (held.engine instanceof EngineError) continue;
      await this.opts.flavor.unregister(this.opts.http, held.engine);
      this.opts.logger.info({ version: id, engine: handleOf(held) }, "adapter version unregistered");
    }
  }

  /**
   * At shutdown: an engine that loaded them at runtime for this server keeps them otherwise, each taking an
   * adapter slot; at once, so a hung engine holds shutdown about timeoutMs (each request's bound), not that per
   * adapter.
   */
  async unregisterAll(): Promise<void> {
    const { flavor, http, logger } = this.opts;
    if (!flavor.features.runtimeAdapterLoading) return;
    const all = [...this.held, ...(this.baseStandIn ? [["base", this.baseStandIn] as const] : [])];
    this.baseStandIn = undefined;
    await Promise.all(
      all.map(async ([id, held]) => {
        if (held.engine instanceof EngineError) return;
        await flavor
          .unregister(http, held.engine)
          .then(() => logger.info({ version: id, engine: handleOf(held) }, "adapter version unregistered"))
          .catch((err: unknown) =>
            logger.warn(
              { version: id, err: (err as Error).message },
              "unregistering an adapter at shutdown failed; it stays loaded in the engine",
            ),
          );
      }),
    );
    this.held.clear();
  }

  /** The engine was unreachable: it may have restarted, so the next request checks its adapters first. */
  markStale(): void {
    this.stale = true;
  }

  /** Before a request after the engine was unreachable (it may have restarted): the check below. */
  ready(): Promise<void> {
    return this.stale ? this.verify() : Promise.resolve();
  }

  /**
   * Asks the engine what it holds now and maps every held version again: llama-server's adapter ids and the
   * contents it loaded (a restart may have put other files under them, or the same files in another order),
   * vLLM's and SGLang's runtime-loaded adapters (loaded again). A restarted engine has none of the sessions'
   * caches. A version the engine no longer serves fails only the requests that name it.
   */
  verify(): Promise<void> {
    const { flavor, http, logger } = this.opts;
    this.verifying ??= (async () => {
      try {
        const restarted = await flavor.reset(http, this.opts.freeSlot());
        if (restarted || this.stale) this.opts.cachesLost();
        for (const held of [...this.held.values(), ...(this.baseStandIn ? [this.baseStandIn] : [])]) {
          held.engine = await flavor.register(http, held.prepared).catch((err: unknown) => {
            if (
              !(err instanceof EngineError) ||
              err instanceof EngineUnavailableError ||
              err instanceof EngineTimeoutError
            )
              throw err;
            return err;
          });
        }
        if (restarted || this.stale)
          logger.info({ engine: http.label, restarted }, "engine checked again; adapters mapped again");
        this.stale = false;
      } finally {
        this.verifying = undefined;
      }
    })();
    return this.verifying;
  }

  /** The engine's names of `versions` now (the base's stand-in for none, where there is one), or the error of one it does not serve. */
  engineAdapters(versions: readonly AdapterVersion[]): EngineAdapter[] {
    if (!versions.length && this.baseStandIn) {
      if (this.baseStandIn.engine instanceof EngineError) throw this.baseStandIn.engine;
      return [this.baseStandIn.engine];
    }
    return versions.map((v) => {
      const engine = this.held.get(v.toString())!.engine;
      if (engine instanceof EngineError) throw engine;
      return engine;
    });
  }
}
