import type { AdapterVersion } from "./AdapterVersion.js";

/**
 * Adapter versions held by work under way (a switch, a reference evaluation), counted: an engine never frees a
 * pinned version. Every backend keeps its pins in one of these.
 */
export class VersionPins {
  private readonly counts = new Map<string, number>();

  pin(versions: readonly AdapterVersion[]): void {
    for (const v of versions.map(String)) this.counts.set(v, (this.counts.get(v) ?? 0) + 1);
  }

  /** Releases one hold on each; returns the versions no longer pinned at all. */
  unpin(versions: readonly AdapterVersion[]): AdapterVersion[] {
    const released: AdapterVersion[] = [];
    for (const version of versions) {
      const v = version.toString();
      const n = (this.counts.get(v) ?? 1) - 1;
      if (n > 0) this.counts.set(v, n);
      else {
        this.counts.delete(v);
        released.push(version);
      }
    }
    return released;
  }

  has(version: AdapterVersion): boolean {
    return this.counts.has(version.toString());
  }
}
