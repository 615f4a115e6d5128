/** How many leading tokens `a` and `b` share: the part of a cache (or a rendering) another one can keep. */
export function commonPrefixLength(a: readonly number[], b: readonly number[]): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}
