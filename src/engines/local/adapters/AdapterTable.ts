import type { AdapterInfo, AdapterSpec, AdapterVersion, EngineLogger } from "../../../engine/index.js";
import { DuplicateAdapterError, UnknownAdapterError, VersionPins } from "../../../engine/index.js";
import type { AdapterWeight } from "../decoding/internals.js";
import type { ResidentAdapters } from "./ResidentAdapters.js";

/**
 * The library as the engine sees it: each alias's current version, the versions resident beside the base (sessions
 * keep the version they loaded), and the versions a switch or a reference is using (pinned, so never freed under it).
 * Deciding what to free is the engine's (`LocalEngine.collect`): it also asks the sessions and the lane pool.
 */
export class AdapterTable {
  private readonly current = new Map<string, AdapterVersion>();
  private readonly pinned = new VersionPins();

  constructor(
    private readonly resident: ResidentAdapters,
    private readonly logger: EngineLogger,
  ) {}

  async add(spec: AdapterSpec): Promise<AdapterInfo> {
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

  /** The alias's new version becomes current; the previous one stays resident while something uses it. */
  async refresh(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const previous = this.info(spec.alias);
    const info = await this.resident.load(spec);
    this.current.set(spec.alias, info.version);
    this.logger.info(
      { alias: spec.alias, from: previous.sha256, to: info.sha256, scale: info.scale },
      "adapter refreshed",
    );
    return { previous, current: info };
  }

  remove(alias: string): AdapterInfo {
    const info = this.info(alias);
    this.current.delete(alias);
    this.logger.info({ alias }, "adapter removed from the library");
    return info;
  }

  info(alias: string): AdapterInfo {
    return this.resident.get(this.resolve(alias));
  }

  /** Every alias's current version. */
  list(): AdapterInfo[] {
    return [...this.current.values()].map((v) => this.resident.get(v));
  }

  /** Every version in memory, current or kept for the sessions that loaded it. */
  residentVersions(): AdapterInfo[] {
    return this.resident.list();
  }

  /** An alias's current version (a resident version's own id is accepted too); UnknownAdapterError otherwise. */
  resolve(alias: string): AdapterVersion {
    const version = this.current.get(alias) ?? this.resident.find(alias);
    if (!version) throw new UnknownAdapterError(alias, [...this.current.keys()]);
    return version;
  }

  /** An activated LoRA's invocation sequence; undefined for an ordinary adapter. */
  invocationOf(version: AdapterVersion): readonly number[] | undefined {
    return this.resident.get(version).invocationTokens;
  }

  /** Where llama.cpp finds the version's file (EngineContext applies it). */
  weight(version: AdapterVersion): AdapterWeight {
    return this.resident.weight(version);
  }

  /** The version is some alias's current one. */
  isCurrent(version: AdapterVersion): boolean {
    return [...this.current.values()].some((v) => v.equals(version));
  }

  /** Every resident version is some alias's current one: nothing could be freed. */
  allCurrent(): boolean {
    return this.resident.list().every((v) => this.isCurrent(v.version));
  }

  /** Keeps versions from being freed while a switch to them, or a reference, is under way. */
  pin(versions: readonly AdapterVersion[]): void {
    this.pinned.pin(versions);
  }

  /** Ends a pin; true when a version it held is no longer current (the engine may free it now). */
  unpin(versions: readonly AdapterVersion[]): boolean {
    return this.pinned.unpin(versions).some((v) => !this.isCurrent(v));
  }

  isPinned(version: AdapterVersion): boolean {
    return this.pinned.has(version);
  }

  /** Frees a version's memory; the engine detached it from every context first. */
  free(version: AdapterVersion): Promise<void> {
    return this.resident.free(version);
  }
}
