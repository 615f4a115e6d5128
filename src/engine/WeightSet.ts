import type { AdapterVersion } from "./AdapterVersion.js";
import type { WeightRequest } from "./types.js";

/** The aliases a weight request names ([] for the base). */
export const aliasesOf = (request: WeightRequest): readonly string[] =>
  request === null ? [] : typeof request === "string" ? [request] : request;

/**
 * The weights a decode runs under, resolved: the base model (its content hash) and the exact adapter versions applied
 * with it (alias, content hash, scale each), as vLLM keeps the adapter it activates apart from the `LoRARequest` that
 * named it. Two sets are the same weights when their keys are equal: order-free, and a refreshed adapter is a new
 * version, so a new key. A cache computed under one set is continued, shared or batched only with the same set.
 */
export class WeightSet {
  private constructor(
    /** The base model's SHA-256. */
    readonly base: string,
    /** The adapter versions, in the order they are applied ([] for the base alone). */
    readonly versions: readonly AdapterVersion[],
    /** Names the set exactly: the base's hash and the versions, order-free (what a cache was computed under). */
    readonly key: string,
  ) {
    this.applied = `${base.slice(0, 16)}:${versions.map(String).join("+") || "base"}`;
  }

  /**
   * The versions in the order llama.cpp is given them (it adds their deltas in that order): a context re-applies, and
   * decodes batch together, only under the same applied form. Always the real versions, whatever `key` says.
   */
  readonly applied: string;

  static of(base: string, versions: readonly AdapterVersion[]): WeightSet {
    return new WeightSet(base, versions, `${base.slice(0, 16)}:${versions.map(String).sort().join("+") || "base"}`);
  }

  /**
   * @internal A set named by `key` rather than by its versions: how tests plant a careless identity (a key by alias
   * alone) to prove that the exact key matters.
   */
  static keyedAs(base: string, versions: readonly AdapterVersion[], key: string): WeightSet {
    return new WeightSet(base, versions, key);
  }

  /** The base's own set (no adapter) over the same model. */
  baseOnly(): WeightSet {
    return WeightSet.of(this.base, []);
  }

  get isBase(): boolean {
    return this.versions.length === 0;
  }

  /** How sessions, reports and traces name it: the aliases joined with "+", null for the base. */
  get label(): string | null {
    return this.versions.length ? this.versions.map((v) => v.alias).join("+") : null;
  }

  equals(other: WeightSet): boolean {
    return this.key === other.key;
  }

  /** The same adapters applied in the same order: what one llama.cpp batch may share. */
  appliesAs(other: WeightSet): boolean {
    return this.applied === other.applied;
  }

  toString(): string {
    return this.key;
  }
}
