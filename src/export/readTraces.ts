import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import type { z } from "zod";
import { describeIssues } from "../library/manifest.js";
import { AnswerEventSchema, fromView, HistoryEventSchema, type Trajectory } from "./recordedTrajectory.js";

/** Something wrong in one trace file; the export skips that line (or the file) and goes on with the rest. */
export interface TraceProblem {
  file: string;
  /** 1-based line number, when the problem is one line. */
  line?: number;
  message: string;
}

export class TraceSourceError extends Error {}

/** Every trajectory in a folder of trace files (or in the given files), and what could not be read. */
export function readTraces(source: string | readonly string[]): {
  trajectories: Trajectory[];
  problems: TraceProblem[];
} {
  const trajectories: Trajectory[] = [];
  const problems: TraceProblem[] = [];
  for (const file of traceFiles(source)) {
    const read = readTraceFile(file);
    problems.push(...read.problems);
    if (read.trajectory) trajectories.push(read.trajectory);
  }
  return { trajectories, problems };
}

function traceFiles(source: string | readonly string[]): string[] {
  if (typeof source !== "string") return [...source];
  if (!existsSync(source)) throw new TraceSourceError(`no trace folder or file at ${source}`);
  if (!statSync(source).isDirectory()) return [source];
  return readdirSync(source)
    .filter((f) => f.endsWith(".jsonl"))
    .sort()
    .map((f) => join(source, f));
}

/**
 * One trace file. A line that is not JSON (a crash mid-write) or not a valid event is reported and skipped;
 * the file still yields its trajectory when its history event is intact.
 */
function readTraceFile(file: string): { trajectory?: Trajectory; problems: TraceProblem[] } {
  const problems: TraceProblem[] = [];
  const problem = (message: string, line?: number) =>
    problems.push({ file, ...(line === undefined ? {} : { line }), message });
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    problem(`unreadable: ${(err as Error).message}`);
    return { problems };
  }
  const parse = <S extends z.ZodType>(
    schema: S,
    raw: unknown,
    line: number,
    consequence = "",
  ): z.infer<S> | undefined => {
    const parsed = schema.safeParse(raw);
    if (parsed.success) return parsed.data;
    problem(
      `invalid ${(raw as { type: string }).type} event${consequence}: ${describeIssues(parsed.error).join("; ")}`,
      line,
    );
    return undefined;
  };

  let answer: z.infer<typeof AnswerEventSchema> | undefined;
  let history: z.infer<typeof HistoryEventSchema> | undefined;
  let historyLine: number | undefined;
  text.split("\n").forEach((content, i) => {
    const line = i + 1;
    if (!content.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(content);
    } catch {
      problem("not JSON (the trace was cut off mid-write?)", line);
      return;
    }
    const type = (raw as { type?: unknown } | null)?.type;
    if (typeof type !== "string") problem("not a trace event (no type)", line);
    else if (line === 1 && type !== "run_start")
      problem(`not a weact-mcp trace (the first event is "${type}", not run_start); skipped`, line);
    else if (type === "answer") answer = parse(AnswerEventSchema, raw, line);
    else if (type === "history") {
      historyLine = line;
      if (!("keepToolResult" in (raw as object)))
        problem(
          "recorded by an older weact-mcp: its history has no keepToolResult nor internal flags; skipped (record it again)",
          line,
        );
      else history = parse(HistoryEventSchema, raw, line, ", trace skipped");
    }
  });
  if (problems.some((p) => p.line === 1)) return { problems };
  if (!history) {
    if (historyLine === undefined)
      problem("no intact history event (the run never finished writing its trace); skipped");
    return { problems };
  }
  const trajectory: Trajectory = {
    id: basename(file, ".jsonl"),
    file,
    ...(answer?.correct ? { correct: answer.correct } : {}),
    keepToolResult: history.keepToolResult,
    ...(history.capabilities ? { capabilities: history.capabilities } : {}),
    messages: history.messages.map(fromView),
  };
  return { trajectory, problems };
}
