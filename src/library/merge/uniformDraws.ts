/**
 * DARE's keep-or-drop draws: uniform numbers in [0, 1) from a merge's seed and a label (the tensor's name), so one
 * tensor's mask does not depend on which tensors came before it. Its own generator (splitmix32 over an FNV-1a
 * hash), not the demo's: the seed a merge records in its manifest entry must make the same file for as long as
 * this code exists, whatever the demo weights' generator becomes.
 */
export function uniformDraws(seed: number, label: string): () => number {
  let state = (seed ^ 0x811c9dc5) >>> 0;
  for (let i = 0; i < label.length; i++) state = Math.imul(state ^ label.charCodeAt(i), 0x01000193) >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
  };
}
