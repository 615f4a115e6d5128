import {
  EngineTimeoutError,
  EngineUnavailableError,
  type AdapterVersion,
  type EngineLogger,
} from "../../../engine/index.js";
import type { RegisteredVersions } from "../adapters/RegisteredVersions.js";
import type { EngineHttp } from "../client/EngineHttp.js";
import { AdapterLostError, type CompletionRequest, type CompletionResult, type Flavor } from "../flavors/Flavor.js";

/** The engine's completions for every session, each under adapter versions named as the engine serves them now. */
export class Completions {
  /** Prompt tokens the engine evaluated for this backend's requests, by its own figures. */
  evaluatedTokens = 0;

  constructor(
    private readonly flavor: Flavor,
    private readonly http: EngineHttp,
    private readonly registered: RegisteredVersions,
    private readonly logger: EngineLogger,
  ) {}

  /**
   * One completion under `versions`, with the recovery of RegisteredVersions.verify. On a slot engine, a request
   * that does not continue from the slot's cache first checks which adapters the engine holds (a switch's
   * prefill, a new session's first request); one that does continue finds out from the cached-token figure
   * whether the engine still had the slot's state: when it had not (it restarted), the adapters are checked, and
   * the request repeated if it named them by ids that now mean other weights.
   */
  async complete(
    versions: readonly AdapterVersion[],
    request: Omit<CompletionRequest, "adapters">,
    flavor: Flavor = this.flavor,
  ): Promise<CompletionResult> {
    const slots = this.flavor.features.slots;
    if (slots && request.reuse === undefined) await this.registered.verify();
    else await this.registered.ready();
    // every request sent counts, a repeated one too: what the engine evaluated for this backend
    const send = async (req: Omit<CompletionRequest, "adapters">) => {
      const result = await flavor.complete(this.http, { ...req, adapters: this.registered.engineAdapters(versions) });
      this.evaluatedTokens += result.evaluated ?? 0;
      return result;
    };
    let result: CompletionResult;
    try {
      result = await send(request);
    } catch (err) {
      // a request that timed out in this server's own line never reached the engine: nothing to check there
      if (err instanceof EngineUnavailableError || (err instanceof EngineTimeoutError && err.queuedFor === undefined))
        this.registered.markStale();
      if (!(err instanceof AdapterLostError)) throw err;
      this.logger.warn(
        { engine: this.http.label, detail: err.detail },
        "the engine lost an adapter (restarted?); registering again and repeating the request",
      );
      this.registered.markStale();
      await this.registered.ready();
      return send(request);
    }
    const expected = request.reuse === undefined ? 0 : Math.min(request.reuse, request.prompt.length - 1);
    if (slots && result.cached !== undefined && result.cached < expected) {
      const before = this.registered.engineAdapters(versions).map((a) => a.handle);
      this.logger.warn(
        { engine: this.http.label, slot: request.slot, cached: result.cached, expected },
        "the engine no longer had a session's cache (restarted?); checking its adapters",
      );
      await this.registered.verify();
      const now = this.registered.engineAdapters(versions).map((a) => a.handle);
      if (now.some((h, i) => h !== before[i])) return send({ ...request, reuse: undefined });
    }
    return result;
  }
}
