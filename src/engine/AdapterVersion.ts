/**
 * One adapter version: one file's bytes (content hash) at one scale, under an alias. A refreshed alias is a new
 * version, so nothing keyed by the old one (a cache, a pin) is ever served the new weights.
 */
export class AdapterVersion {
  private constructor(
    readonly alias: string,
    /** SHA-256 of the adapter file's bytes. */
    readonly sha256: string,
    /** Multiplies the adapter's own alpha/rank scaling. */
    readonly scale: number,
  ) {}

  static of(alias: string, sha256: string, scale: number): AdapterVersion {
    return new AdapterVersion(alias, sha256, scale);
  }

  equals(other: AdapterVersion): boolean {
    return this.alias === other.alias && this.sha256 === other.sha256 && this.scale === other.scale;
  }

  /** "alias@sha256xscale": how listings, logs and traces name the version. */
  toString(): string {
    return `${this.alias}@${this.sha256}x${this.scale}`;
  }

  toJSON(): string {
    return this.toString();
  }
}
