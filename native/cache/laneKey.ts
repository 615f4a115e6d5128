/**
 * A lane's identity: the base model (its content hash) and the exact adapter versions applied (each an id of
 * alias, content hash and scale), order-free. A refreshed adapter is a new version, so a new key: no lane
 * built under old bytes can be continued under new ones.
 */
export function laneKey(modelSha256: string, versions: readonly string[]): string {
  return `${modelSha256.slice(0, 16)}:${[...versions].sort().join("+") || "base"}`;
}
