import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { describeIssues } from "../library/manifest.js";
import { CONVERTERS, type ModelFunctions } from "./convert.js";
import { describeFilter, selects, type TrajectoryFilter } from "./filter.js";
import { LINE_SCHEMAS, type ExportFormat } from "./formats.js";
import { readTraces, type TraceProblem } from "./readTraces.js";
import type { Trajectory } from "./recordedTrajectory.js";
import { segment, type StageExit, type StageSample } from "./segment.js";
import { tokenStats, type TokenCounter, type TokenStats } from "./stats.js";

export interface ExportOptions {
  /** A folder of trace files, or the files. */
  from: string | readonly string[];
  capability: string;
  filter: TrajectoryFilter;
  format: ExportFormat;
  /** The JSONL file to write. */
  out: string;
  countTokens: TokenCounter;
  /** The functions a trajectory's model was offered, written as each of its lines' `tools`. */
  functionsOf?: (t: Trajectory) => ModelFunctions;
}

export interface ExportSummary {
  capability: string;
  format: ExportFormat;
  out: string;
  filter: string;
  trajectories: { read: number; selected: number };
  problems: TraceProblem[];
  /** Stage occurrences exported (a sample all of whose lines were duplicates is not counted). */
  samples: number;
  lines: number;
  duplicates: number;
  exits: Record<StageExit, number>;
  tokens: TokenStats;
}

/** A line that fails its own format's schema: a bug in the converter, never written. */
export class ExportFormatError extends Error {}

/** Trajectories -> the capability's stage samples -> JSONL lines of one format, identical lines written once. */
export function exportDataset(options: ExportOptions): ExportSummary {
  const { trajectories, problems } = readTraces(options.from);
  const selected = trajectories.filter((t) => selects(options.filter, t));
  const seen = new Set<string>();
  const lines: string[] = [];
  const kept: StageSample[] = [];
  let duplicates = 0;
  const samples = selected.flatMap((t) => segment(t, options.capability).map((sample) => ({ sample, t })));
  for (const { sample, t } of samples) {
    let added = false;
    for (const line of CONVERTERS[options.format](sample, options.functionsOf?.(t))) {
      const text = checkedLine(options.format, line, sample);
      const hash = createHash("sha256").update(text).digest("hex");
      if (seen.has(hash)) duplicates++;
      else {
        seen.add(hash);
        lines.push(text);
        added = true;
      }
    }
    if (added) kept.push(sample);
  }
  mkdirSync(dirname(options.out), { recursive: true });
  writeFileSync(options.out, lines.map((l) => `${l}\n`).join(""));
  const exits: Record<StageExit, number> = { model: 0, harness: 0, client: 0, end: 0 };
  for (const s of kept) exits[s.exit]++;
  return {
    capability: options.capability,
    format: options.format,
    out: options.out,
    filter: describeFilter(options.filter),
    trajectories: { read: trajectories.length, selected: selected.length },
    problems,
    samples: kept.length,
    lines: lines.length,
    duplicates,
    exits,
    tokens: tokenStats(kept, options.countTokens),
  };
}

function checkedLine(format: ExportFormat, line: object, sample: StageSample): string {
  const parsed = LINE_SCHEMAS[format].safeParse(line);
  if (!parsed.success)
    throw new ExportFormatError(
      `${format} line of ${sample.trajectory} (${sample.capability} stage ${sample.occurrence}): ${describeIssues(parsed.error).join("; ")}`,
    );
  return JSON.stringify(line);
}

export const formatProblem = (p: TraceProblem) => `${p.file}${p.line === undefined ? "" : `:${p.line}`}: ${p.message}`;

export function formatSummary(s: ExportSummary): string {
  const t = s.tokens;
  return [
    `${s.capability}: ${s.samples} samples, ${s.lines} ${s.format} lines -> ${s.out}${s.duplicates ? ` (${s.duplicates} duplicate lines dropped)` : ""}`,
    `trajectories: ${s.trajectories.read} read, ${s.trajectories.selected} selected (filter: ${s.filter})${s.problems.length ? `; ${s.problems.length} trace problems` : ""}`,
    `stage exits: ${Object.entries(s.exits)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}`,
    `tokens: context mean ${t.context.mean.toFixed(0)}, p95 ${t.context.p95}; target mean ${t.target.mean.toFixed(0)}, p95 ${t.target.p95}`,
  ].join("\n");
}
