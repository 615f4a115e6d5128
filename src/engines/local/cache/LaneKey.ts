import type { AdapterVersion } from "../../../engine/index.js";

/**
 * A lane's identity: the base model (its content hash) and the exact adapter versions applied (each alias,
 * content hash and scale), order-free. A refreshed adapter is a new version, so a new key: no lane built under
 * old bytes can be continued under new ones.
 */
export class LaneKey {
  private constructor(private readonly text: string) {}

  static of(modelSha256: string, versions: readonly AdapterVersion[]): LaneKey {
    return new LaneKey(`${modelSha256.slice(0, 16)}:${versions.map(String).sort().join("+") || "base"}`);
  }

  equals(other: LaneKey): boolean {
    return this.text === other.text;
  }

  toString(): string {
    return this.text;
  }
}
