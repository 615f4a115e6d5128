import { randomBytes } from "node:crypto";
import { commonPrefixLength, invocationStart, type AdapterVersion, type TokenId } from "../../../engine/index.js";
import type { CompletionRequest, CompletionResult, Flavor } from "../flavors/Flavor.js";
import { ONE_CHARACTER } from "../turn/grammar.js";
import type { RemoteEngineServices } from "./RemoteEngineServices.js";

export const sameVersions = (a: readonly AdapterVersion[], b: readonly AdapterVersion[]) =>
  a.length === b.length && a.every((v, i) => v.equals(b[i]!));

const newSalt = () => randomBytes(16).toString("hex");

/**
 * What llama-server keeps of a slot under an activated LoRA whose invocation starts at `point`: what lies before the
 * token ahead of it (that token it evaluates with the adapter).
 */
const keptBefore = (point: number) => Math.max(0, point - 1);

/** A prefill request's figures, by the engine's own count. */
export interface Prefilled {
  cached: number;
  evaluated: number;
  ms: number;
}

/**
 * What a session knows the engine's cache holds for it, and the requests that keep that knowledge true. Every
 * request goes out in the session's slot with its salt; on a slot, the engine may continue from its cache only
 * where the prompt agrees with what the session knows it computed there under the same adapters.
 */
export class SessionCache {
  /**
   * Tokens the engine's slot holds for this session, computed by its requests under `versions` (the slot may hold
   * more of them, e.g. the tokens of a turn it generated); undefined when that is not known.
   */
  private known:
    | {
        tokens: readonly TokenId[];
        versions: readonly AdapterVersion[];
        /** An activated LoRA's invocation point in `tokens` (Infinity: absent, the base throughout). */
        point?: number;
      }
    | undefined;
  /**
   * Keeps other sessions (other clients) off this session's cache in an engine whose prefix cache is shared; a new one
   * on clear.
   */
  private salt = newSalt();

  constructor(
    private readonly host: Pick<RemoteEngineServices, "complete" | "invocationOf">,
    /** llama-server: the engine slot this session's cache lives in. */
    readonly slot: number | undefined,
    /** A planted flavor (tests only); default the engine's. */
    private readonly flavor?: Flavor,
  ) {}

  get tokens(): number {
    return this.known?.tokens.length ?? 0;
  }

  /** The engine lost its caches (it restarted): the next request evaluates everything. */
  forget(): void {
    this.known = undefined;
  }

  /** Forgets the cache, and takes a new salt so no later request can continue from it. */
  clear(): void {
    this.known = undefined;
    this.salt = newSalt();
  }

  /**
   * How many of `prompt`'s tokens the engine may take from the session's slot: what the session knows the slot
   * holds under `versions`, where the prompt agrees with it (one is the start of the other). Undefined (evaluate
   * everything) otherwise: the slot may hold another session's cache, a state computed under other adapters, or
   * one put back by a host-memory cache.
   */
  reusable(
    versions: readonly AdapterVersion[],
    prompt: readonly TokenId[],
    cachedUnder: readonly AdapterVersion[] = versions,
  ): number | undefined {
    if (!this.known || !sameVersions(cachedUnder, this.known.versions)) return undefined;
    const agreed = commonPrefixLength(this.known.tokens, prompt);
    if (agreed !== Math.min(this.known.tokens.length, prompt.length)) return undefined;
    const point = this.pointOf(versions, prompt);
    if (point === undefined) return agreed;
    // an activated LoRA's slot holds the adapter's KV from the token before its point: where the point moved (a later
    // invocation, or none), the base's is wanted there
    if (sameVersions(cachedUnder, versions) && point !== this.known.point) return undefined;
    return Math.min(agreed, keptBefore(point));
  }

  /** Where an activated LoRA applies from in `prompt` (Infinity: nowhere); undefined for other adapters. */
  private pointOf(versions: readonly AdapterVersion[], prompt: readonly TokenId[]): number | undefined {
    const invocation = versions.length === 1 ? this.host.invocationOf(versions[0]!) : undefined;
    return invocation && (invocationStart(prompt, invocation) ?? Infinity);
  }

  /**
   * How much of `prompt` the engine may keep in a slot under `versions`: under an activated LoRA, llama-server keeps
   * only what lies before the token ahead of its invocation (it evaluates that token with the adapter).
   */
  private keepable(versions: readonly AdapterVersion[], prompt: readonly TokenId[]): number {
    const point = this.pointOf(versions, prompt);
    return point === undefined ? prompt.length : Math.min(prompt.length, keptBefore(point));
  }

  /**
   * One request in the session's slot with its salt; after a failure the session no longer knows what its slot
   * holds, after an answer it holds the prompt (the tokens of a generated turn too, but the next prompt has the
   * turn as the template renders it).
   */
  async send(
    versions: readonly AdapterVersion[],
    request: Omit<CompletionRequest, "adapters" | "slot">,
  ): Promise<CompletionResult> {
    this.known = undefined;
    const result = await this.host.complete(
      versions,
      { ...request, slot: this.slot, cacheSalt: this.salt },
      this.flavor,
    );
    this.known = { tokens: request.prompt, versions, point: this.pointOf(versions, request.prompt) };
    return result;
  }

  /**
   * Brings the engine's cache to the prompt minus its last token under `versions`: `switch` evaluates all of it
   * under new adapters, `activate` (from the base to an activated LoRA) may continue from the base's cache, which
   * the engine keeps up to the token before the invocation, `always` sends the request even if the session knows
   * the slot holds it, `ifNeeded` only when it does not. Where sessions have slots this is what makes every sampled
   * position be evaluated alone, whatever was cached before. Undefined when nothing was sent.
   */
  async prefill(
    versions: readonly AdapterVersion[],
    tokens: readonly TokenId[],
    mode: "switch" | "activate" | "always" | "ifNeeded",
    signal?: AbortSignal,
  ): Promise<Prefilled | undefined> {
    const target = tokens.slice(0, -1);
    if (!target.length) return undefined;
    const reuse = mode === "switch" ? undefined : this.reusable(versions, target, mode === "activate" ? [] : versions);
    // all the engine keeps of it is held already (under an activated LoRA it evaluates from its point anyway)
    if (mode === "ifNeeded" && reuse === this.keepable(versions, target)) return undefined;
    const started = performance.now();
    const r = await this.send(versions, {
      prompt: target,
      maxTokens: 0,
      temperature: 0,
      reuse,
      grammar: ONE_CHARACTER,
      signal,
    });
    const cached = Math.min(r.cached ?? 0, target.length);
    return { cached, evaluated: r.evaluated ?? target.length - cached, ms: performance.now() - started };
  }
}
