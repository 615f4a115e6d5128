/**
 * Queries over the shipped corpus and the document each should rank first: the search tests and the index benchmark
 * share them.
 */
export const KNOWN_QUERIES: readonly (readonly [query: string, id: string])[] = [
  ["second longest river in Europe", "geography/danube.txt"],
  ["first woman to win a Nobel Prize", "science/people.jsonl#marie-curie"],
  ["Challenger Deep", "geography/mariana-trench.txt"],
  ["three-way handshake", "computing/tcp.md"],
  ["stale cache after weights change", "computing/kv-cache.md"],
  ["Gustave Eiffel World's Fair", "geography/landmarks.html"],
  ["Bernoulli numbers program", "science/people.jsonl#ada-lovelace"],
  ["Blue Nile Lake Tana", "geography/nile.md"],
];
