/**
 * One adapter version: one file's bytes (content hash) at one scale, under an alias, and for engines that load
 * PEFT folders the folder's bytes too. A refreshed alias is a new version, so nothing keyed by the old one (a
 * cache, a pin) is ever served the new weights.
 */
export class AdapterVersion {
  private constructor(
    readonly alias: string,
    /** SHA-256 of the adapter file's bytes. */
    readonly sha256: string,
    /** Multiplies the adapter's own alpha/rank scaling. */
    readonly scale: number,
    /**
     * SHA-256 of the PEFT folder the engine loads instead of the GGUF (its config and weights), when it is part of the
     * version.
     */
    readonly peftSha256?: string,
  ) {}

  static of(alias: string, sha256: string, scale: number, peftSha256?: string): AdapterVersion {
    return new AdapterVersion(alias, sha256, scale, peftSha256);
  }

  equals(other: AdapterVersion): boolean {
    return (
      this.alias === other.alias &&
      this.sha256 === other.sha256 &&
      this.scale === other.scale &&
      this.peftSha256 === other.peftSha256
    );
  }

  /**
   * "alias@sha256xscale" (with "+peft:sha256" after the file's hash for a PEFT folder): how listings, logs and traces
   * name the version.
   */
  toString(): string {
    return `${this.alias}@${this.sha256}${this.peftSha256 ? `+peft:${this.peftSha256}` : ""}x${this.scale}`;
  }

  toJSON(): string {
    return this.toString();
  }
}
