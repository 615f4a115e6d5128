import { z } from "zod";
import { describeIssues } from "../library/manifest.js";
import type { ModelFunctions } from "./convert.js";
import { exportDataset, formatProblem, formatSummary } from "./exportDataset.js";
import { parseFilter, selects, type TrajectoryFilter } from "./filter.js";
import { ExportFormatSchema } from "./formats.js";
import { readTraces } from "./readTraces.js";
import { datasetStats, formatStats, type TokenCounter } from "./stats.js";
import type { Trajectory } from "./recordedTrajectory.js";

/** `weact-mcp export` flags. Without --stats it writes one capability's dataset; with it, prints the stats table. */
const ExportCommandSchema = z
  .object({
    capability: z.string().min(1).optional(),
    from: z.string().min(1).optional(),
    filter: z.string().min(1).default("all"),
    format: z.string().default("axolotl").pipe(ExportFormatSchema),
    out: z.string().min(1).optional(),
    stats: z.boolean().default(false),
  })
  .refine((o) => o.capability !== undefined || o.stats, {
    message: "export needs --capability ALIAS (or --stats)",
    path: ["capability"],
  });
export type ExportCommandInput = z.input<typeof ExportCommandSchema>;
export type ExportCommand = Omit<z.output<typeof ExportCommandSchema>, "filter"> & { filter: TrajectoryFilter };

export class ExportUsageError extends Error {}

/** Checked before the model loads, so a wrong flag (or a missing filter file) fails at once. */
export function parseExportCommand(input: ExportCommandInput): ExportCommand {
  const parsed = ExportCommandSchema.safeParse(input);
  if (!parsed.success) throw new ExportUsageError(`export: ${describeIssues(parsed.error).join("; ")}`);
  return { ...parsed.data, filter: parseFilter(parsed.data.filter) };
}

export interface ExportDeps {
  /** Where the harness writes traces (the default of --from). */
  traceDir: string;
  countTokens: TokenCounter;
  functionsOf?: (t: Trajectory) => ModelFunctions;
}

interface Output {
  write(text: string): unknown;
}

/** Runs the command: trace problems on `err` (each names file and line), the summary or table on `out`. */
export function runExport(
  command: ExportCommand,
  deps: ExportDeps,
  out: Output = process.stdout,
  err: Output = process.stderr,
): void {
  const from = command.from ?? deps.traceDir;
  if (command.stats) {
    const { trajectories, problems } = readTraces(from);
    for (const p of problems) err.write(`${formatProblem(p)}\n`);
    const stats = datasetStats(
      trajectories.filter((t) => selects(command.filter, t)),
      deps.countTokens,
    );
    out.write(
      `${formatStats(command.capability ? stats.filter((s) => s.capability === command.capability) : stats)}\n`,
    );
    return;
  }
  const capability = command.capability!;
  const summary = exportDataset({
    from,
    capability,
    filter: command.filter,
    format: command.format,
    out: command.out ?? `${capability}.${command.format}.jsonl`,
    countTokens: deps.countTokens,
    functionsOf: deps.functionsOf,
  });
  for (const p of summary.problems) err.write(`${formatProblem(p)}\n`);
  out.write(`${formatSummary(summary)}\n`);
}
