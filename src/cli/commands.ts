import { rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { readGgufHeader, sha256File } from "../gguf/index.js";
import { ensureDemoWeights } from "../demo/ensure.js";
import { FAMILY_NAMES } from "../demo/families.js";
import { generateFamilySet, QUANT_NAMES, type FamilySet, type QuantName } from "../demo/familySets.js";
import {
  addManifestEntry,
  describeIssues,
  loadManifest,
  ManifestEntrySchema,
  type LibraryEntry,
} from "../library/manifest.js";
import { MERGE_METHODS } from "../library/merge/index.js";
import { importPeft } from "../library/peft/index.js";
import { parseExportCommand, runExport, type ExportCommandInput } from "../export/exportCommand.js";
import { modelFunctions } from "../sessions/modelFunctions.js";
import type { ResolvedConfig } from "../config/loadConfig.js";
import { evalWeights, formatTable, runEval, writeReport } from "../harness/eval/runEval.js";
import { readTaskFile } from "../harness/eval/TaskFile.js";
import { runTask } from "../harness/runTaskUnderPolicy.js";
import { mergePolicies } from "../harness/runInput.js";
import { FIXED_POLICIES, MERGE_POLICIES, mergePolicy, type Policy } from "../harness/types.js";
import type { Logger } from "../log.js";
import { STATE_DIR } from "../paths.js";
import { startExportServices, startServices, startTokenizer, traceDirOf } from "../composition/services.js";

export class UsageError extends Error {}

/**
 * The library as its manifest lists it: what --policy and --workflow may name. Read from the manifest, not the
 * loaded library, so a wrong value fails before the model loads.
 */
const libraryEntries = (config: ResolvedConfig) => loadManifest(config.manifestPath);

/** A comma-separated --policy list, each one a policy this library can run. */
function policies(list: string, entries: readonly LibraryEntry[]): Policy[] {
  const merges = MERGE_POLICIES.filter((p) => entries.some((e) => e.merge && mergePolicy(e.merge.method) === p));
  const allowed = [...FIXED_POLICIES, ...merges, ...entries.map((e) => `single:${e.alias}`)];
  return list.split(",").map((p) => {
    const name = p.trim();
    if (allowed.includes(name)) return name;
    const unmade = MERGE_METHODS.find((m) => mergePolicy(m) === name);
    throw new UsageError(
      unmade
        ? `--policy: the library has no ${unmade} merge for ${name}; make one with \`weact-mcp merge --method ${unmade} --out FILE.gguf\``
        : `--policy: "${name}" is not one of ${allowed.join(", ")} (single:ALIAS names an adapter of the library, adapters.manifest)`,
    );
  });
}

/** A comma-separated --workflow: the stages of the hard policy, each an adapter of the library that is not a merge. */
function workflow(list: string, entries: readonly LibraryEntry[]): string[] {
  const capabilities = entries.filter((e) => !e.merge).map((e) => e.alias);
  return list.split(",").map((a) => {
    const alias = a.trim();
    if (capabilities.includes(alias)) return alias;
    throw new UsageError(
      entries.some((e) => e.alias === alias)
        ? `--workflow: "${alias}" is a static merge, not a capability a stage loads (${capabilities.join(", ")})`
        : `--workflow: "${alias}" is not an adapter of the library (${capabilities.join(", ")}; adapters.manifest)`,
    );
  });
}

/** `weact-mcp run "task"`: one trajectory in-process; progress on stderr, the answer on stdout. */
export async function runCommand(
  config: ResolvedConfig,
  logger: Logger,
  task: string,
  opts: { policy?: string; workflow?: string; seed?: number },
) {
  // every flag is checked before the model loads
  const entries = libraryEntries(config);
  const [policy] = policies(opts.policy ?? "hard", entries);
  const stages = opts.workflow === undefined ? undefined : workflow(opts.workflow, entries);
  const services = await startServices(config, logger);
  try {
    const r = await runTask(
      services.harness,
      "cli",
      { task, policy, seed: opts.seed, workflow: stages },
      { onProgress: (p) => process.stderr.write(`[${p.turn}] ${p.message}\n`) },
    );
    const t = r.time;
    const why = r.degenerate
      ? ` (${r.degenerate.rule} in stage ${r.degenerate.stage}, turn ${r.degenerate.turn}: ${r.degenerate.detail})`
      : r.grounded === false
        ? " (ungrounded: nothing the run read states the answer)"
        : "";
    process.stderr.write(
      `finish: ${r.finish}${why}; stages: ${r.stages.join(" -> ")}; ${r.switches} switches; ${(t.wallMs / 1000).toFixed(2)} s (model ${Object.entries(
        t.model,
      )
        .map(([k, v]) => `${k} ${(v / 1000).toFixed(2)}`)
        .join(
          ", ",
        )}; tools ${(t.externalTool / 1000).toFixed(2)}; control ${(t.adapterControl / 1000).toFixed(3)}; cache ${(t.cacheRebuild / 1000).toFixed(2)}; unattributed ${(t.unattributedShare * 100).toFixed(2)}%)\ntrace: ${r.traceFile}\n`,
    );
    process.stdout.write(`${r.answer}\n`);
  } finally {
    await services.dispose();
  }
}

/** `weact-mcp eval tasks.jsonl`: every task under each policy; a table, report.json and chart.svg. */
export async function evalCommand(
  config: ResolvedConfig,
  logger: Logger,
  file: string,
  opts: { policy?: string; workflow?: string; out?: string; seed?: number },
) {
  // the file and every flag are checked before the model loads
  const tasks = readTaskFile(file);
  const entries = libraryEntries(config);
  const chosen = opts.policy === undefined ? undefined : policies(opts.policy, entries);
  const stages = opts.workflow === undefined ? config.harness.workflow : workflow(opts.workflow, entries);
  const services = await startServices({ ...config, harness: { ...config.harness, workflow: stages } }, logger);
  try {
    // the paper's comparison: the base alone, each adapter alone, all of them at once and each static merge the
    // library has, then the two switching policies; each adapter that loaded (an entry the library left out would
    // refuse the whole eval up front)
    const library = services.harness.library;
    const list = chosen ?? [
      "base",
      ...library.capabilities().map((a) => `single:${a.entry.alias}`),
      "static",
      ...mergePolicies(library),
      "hard",
      "soft",
    ];
    const model = services.runtime.engine.model;
    const report = await runEval(services.harness, tasks, list, {
      tasksFile: file,
      weights: evalWeights(model, library),
      seed: opts.seed,
      onRun: (task, policy, r) =>
        process.stderr.write(
          `${policy} ${task}: ${r instanceof Error ? `error: ${r.message}` : `${(r.time.wallMs / 1000).toFixed(2)} s, ${r.correct?.contains ? "correct" : "wrong"}, finish ${r.finish}`}\n`,
        ),
    });
    const out = writeReport(
      report,
      opts.out ?? join(STATE_DIR, "eval", new Date().toISOString().replace(/[:.]/g, "-")),
    );
    process.stdout.write(`${formatTable(report)}\n\nreport: ${out.json}\nchart:  ${out.chart}\n`);
  } finally {
    await services.dispose();
  }
}

/** `weact-mcp import-peft DIR --alias A --description D`: a PEFT folder becomes a GGUF LoRA in the library. */
export async function importPeftCommand(
  config: ResolvedConfig,
  logger: Logger,
  dir: string,
  opts: { alias?: string; description?: string; scale?: number },
) {
  if (!opts.alias || !opts.description) throw new UsageError("import-peft needs --alias and --description");
  const entry = ManifestEntrySchema.safeParse({
    alias: opts.alias,
    description: opts.description,
    file: `${opts.alias}.gguf`,
    scale: opts.scale ?? 1,
  });
  if (!entry.success) throw new UsageError(describeIssues(entry.error).join("; "));
  const manifest = config.manifestPath;
  // checked before the conversion too, so a taken alias fails before the work
  if (loadManifest(manifest).some((e) => e.alias === opts.alias))
    throw new UsageError(
      `the manifest already has an adapter "${opts.alias}"; choose another --alias (or refresh_adapter to replace its file)`,
    );
  const baseFile = config.model.path ?? ensureDemoWeights(logger).model;
  const base = readGgufHeader(baseFile);
  const result = await importPeft({
    dir,
    base,
    alias: opts.alias,
    outFile: join(dirname(manifest), `${opts.alias}.gguf`),
  });
  try {
    // recorded for this base: a server of another base refuses the adapter, however alike the shapes
    addManifestEntry(manifest, { ...entry.data, baseSha256: await sha256File(baseFile), filePath: result.outFile });
  } catch (err) {
    rmSync(result.outFile, { force: true });
    throw err;
  }
  process.stdout.write(
    `imported ${dir} as "${opts.alias}": ${result.outFile} (rank ${result.rank}, alpha ${result.alpha}, ${result.targets} targets, sha256 ${result.sha256}); added to ${manifest}\n`,
  );
}

/** `weact-mcp demo-weights --family NAME|all --quant Q|all`: the sets, in family then quant order. */
export function generateFamilySets(root: string, family: string, quant: string, seed?: number): FamilySet[] {
  const families = family === "all" ? FAMILY_NAMES : [family];
  const quants = quant === "all" ? QUANT_NAMES : [quant];
  for (const f of families)
    if (!FAMILY_NAMES.includes(f))
      throw new UsageError(`--family: "${f}" is not one of ${FAMILY_NAMES.join(", ")} or all`);
  for (const q of quants)
    if (!QUANT_NAMES.includes(q as QuantName))
      throw new UsageError(`--quant: "${q}" is not one of ${QUANT_NAMES.join(", ")} or all`);
  return families.flatMap((f) => quants.map((q) => generateFamilySet(root, f, q as QuantName, seed)));
}

/** `weact-mcp export`: one capability's training data from recorded traces, or (--stats) the stats table. */
export async function exportCommand(config: ResolvedConfig, logger: Logger, input: ExportCommandInput) {
  const command = parseExportCommand(input); // bad flags or filter file fail before the model loads
  const traceDir = traceDirOf(config);
  if (command.stats) {
    // counting tokens needs the tokenizer only
    const tokenizer = await startTokenizer(config, logger);
    try {
      runExport(command, { traceDir, countTokens: tokenizer.countTokens });
    } finally {
      await tokenizer.dispose();
    }
    return;
  }
  const services = await startExportServices(config, logger);
  try {
    runExport(command, {
      traceDir,
      countTokens: (text) => services.runtime.engine.tokenize(text).length,
      functionsOf: (t) => modelFunctions(services.runtime.library, services.toolbox.modelFunctions(), t.capabilities),
    });
  } finally {
    await services.dispose();
  }
}
