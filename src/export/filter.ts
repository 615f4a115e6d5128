import { existsSync, readFileSync } from "node:fs";
import type { Trajectory } from "./recordedTrajectory.js";

/**
 * Which trajectories an export keeps. `correct`: judged correct by the eval runner (exact match or normalised
 * containment, the README's definition); runs recorded without an expected answer are not judged and not kept.
 */
export type TrajectoryFilter =
  { kind: "all" } | { kind: "correct" } | { kind: "ids"; file: string; ids: ReadonlySet<string> };

export class FilterError extends Error {}

/** `all`, `correct`, or a file of trace ids (one per line; blank lines and `#` comments ignored). */
export function parseFilter(arg: string): TrajectoryFilter {
  if (arg === "all" || arg === "correct") return { kind: arg };
  if (!existsSync(arg)) throw new FilterError(`--filter: "${arg}" is not all, correct or a file of trace ids`);
  const ids = readFileSync(arg, "utf8")
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
  if (!ids.length) throw new FilterError(`--filter: ${arg} lists no trace ids`);
  return { kind: "ids", file: arg, ids: new Set(ids) };
}

export function selects(filter: TrajectoryFilter, trajectory: Trajectory): boolean {
  switch (filter.kind) {
    case "all":
      return true;
    case "correct":
      return trajectory.correct !== undefined && (trajectory.correct.exact || trajectory.correct.contains);
    case "ids":
      return filter.ids.has(trajectory.id);
  }
}

export const describeFilter = (filter: TrajectoryFilter) =>
  filter.kind === "ids" ? `ids in ${filter.file}` : filter.kind;
