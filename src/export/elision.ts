import { elidedResults, elisionMarker, type HistoryMessage } from "../sessions/history.js";

/** How many external results the model read as a marker when it generated at position `end`. */
const elidedCount = (history: readonly HistoryMessage[], end: number, keep: number) =>
  elidedResults(history.slice(0, end), keep).size;

/**
 * `history[0, end)` as the model read it when it generated at `end`: the server's keep_tool_result rule
 * (sessions/history.ts) applied as of that point, with the server's own marker. Weight-action results stay.
 */
export function asReadAt(history: readonly HistoryMessage[], end: number, keep: number): HistoryMessage[] {
  const read = history.slice(0, end);
  const elided = elidedResults(read, keep);
  return read.map((m) => (elided.has(m) && m.role === "tool" ? { ...m, content: elisionMarker(m, keep) } : m));
}

/**
 * Targets grouped by what they read: consecutive targets generated under the same elision share one rendered
 * sequence. A new external result past `keep` turns an older one into a marker, so later targets start a group.
 */
export function elisionGroups(
  history: readonly HistoryMessage[],
  targets: readonly number[],
  keep: number,
): number[][] {
  const groups: { elided: number; targets: number[] }[] = [];
  for (const t of targets) {
    const elided = elidedCount(history, t, keep);
    const last = groups.at(-1);
    if (last?.elided === elided) last.targets.push(t);
    else groups.push({ elided, targets: [t] });
  }
  return groups.map((g) => g.targets);
}
