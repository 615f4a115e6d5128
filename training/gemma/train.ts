import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { readGgufHeader, type GgufFile } from "../../src/gguf/index.js";
import { importPeft } from "../../src/library/peft/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { heldOutFile, windowsFile, type TrainingRun } from "../pipeline/run.js";
import { writeLibraryManifest } from "../pipeline/train.js";
import { aloraCheckpoints, invocationsFile, trainerInvocations, type Invocations } from "./alora.js";
import { checkImport } from "./checkImport.js";
import { GEMMA_STAGE_BUDGETS, PYTHON_SOURCES } from "./library.js";
import { peftDir, trainerRecord } from "./paths.js";
import { pipelinePython } from "./venv.js";

/**
 * The LoRA recipe, chosen to fit the 90-minute budget on 2 CPU cores (torch trains Gemma 3 270M at ~210 tokens/s
 * there, and a stage sample is 700-1,200 tokens, most of them the system prompt and the function docs): rank 8 on
 * every projection (attention and MLP) keeps each adapter at 3.8 MB in F16; one pass over fresh trajectories rather
 * than several over fewer.
 */
export const RECIPE = { rank: 8, alpha: 16, lr: 1e-3, epochs: 1, batch: 4, warmup: 5 } as const;

export interface CapabilityResult {
  capability: string;
  [key: string]: unknown;
}

/** A LoRA recipe as train_lora.py takes it. */
export interface TrainerRecipe {
  rank: number;
  alpha: number;
  lr: number;
  epochs: number;
  batch: number;
  warmup: number;
}

/**
 * train_lora.py in the pipeline's virtual environment (one PEFT LoRA per capability, the base frozen) with `recipe`
 * and any further flags, its progress lines passed on to stderr: each capability's result line, in order.
 */
export async function runTrainer(
  run: TrainingRun,
  model: string,
  capabilities: readonly string[],
  recipe: TrainerRecipe,
  extra: readonly string[] = [],
): Promise<CapabilityResult[]> {
  const python = pipelinePython(run.logger);
  const args = [
    join(PYTHON_SOURCES, "train_lora.py"),
    ...["--model", model, "--work", run.work, "--out", join(run.work, "peft")],
    ...["--seed", String(run.seed), "--threads", String(run.threads), "--capabilities", capabilities.join(",")],
    ...["--rank", String(recipe.rank), "--alpha", String(recipe.alpha), "--lr", String(recipe.lr)],
    ...["--epochs", String(recipe.epochs), "--batch", String(recipe.batch), "--warmup", String(recipe.warmup)],
    ...extra,
  ];
  const child = spawn(python, args, { stdio: ["ignore", "pipe", "inherit"] });
  const results: CapabilityResult[] = [];
  for await (const line of createInterface({ input: child.stdout })) {
    const parsed = JSON.parse(line) as { result?: CapabilityResult };
    if (parsed.result) results.push(parsed.result);
    process.stderr.write(`${line}\n`);
  }
  const code = await new Promise<number | null>((done) => child.on("close", done));
  if (code !== 0) throw new Error(`train_lora.py exited with ${code}`);
  return results;
}

/**
 * The train step: the library's capabilities trained with RECIPE; their result lines go to the trainer's record.
 * `alora`: each capability is an activated LoRA on its invocation sequence (training/gemma/alora.ts), trained from
 * its last checkpoint in the model cache, and after `minutes` (0: no limit) the trainer stops at a checkpoint, to go
 * on at the next call. True when every capability finished (and the record is written).
 */
export async function trainAdapters(
  run: TrainingRun,
  model: string,
  capabilities: readonly string[] = ORACLE_WORKFLOW,
  { alora = false, minutes = 0 }: { alora?: boolean; minutes?: number } = {},
): Promise<boolean> {
  const started = Date.now();
  const extra = alora
    ? [
        ...["--invocations", trainerInvocations(run), "--checkpoints", aloraCheckpoints(run)],
        ...["--checkpoint-every", "2", "--max-minutes", String(minutes)],
      ]
    : [];
  const results = await runTrainer(run, model, capabilities, RECIPE, extra);
  if (results.length < capabilities.length) {
    process.stderr.write("train_lora.py stopped at a checkpoint: run the train step again to go on\n");
    return false;
  }
  const seconds = Math.round((Date.now() - started) / 1000);
  // a resumed run's own seconds undercount: each result line carries its capability's whole training time
  writeFileSync(trainerRecord(run), `${JSON.stringify({ seconds, results }, null, 2)}\n`);
  return true;
}

/** The paper's static merges of the three adapters (`weact-mcp merge`, its defaults), for policies static:<method>. */
export function writeStaticMerges(run: TrainingRun): void {
  for (const method of ["linear", "ties", "dare-ties"]) {
    const out = join(run.out, `static-${method}.gguf`);
    // the manifest was just written without it: merge refuses to overwrite a file it does not list
    rmSync(out, { force: true });
    execFileSync(
      process.execPath,
      [join(PACKAGE_ROOT, "dist", "src", "cli", "main.js"), "merge", "--config", join(run.out, "config.json")].concat([
        "--method",
        method,
        "--out",
        out,
      ]),
      { stdio: ["ignore", "inherit", "inherit"] },
    );
  }
}

/** A PEFT folder of the train step as a GGUF LoRA in the library's folder (`file`), through the TypeScript importer. */
export async function importAdapter(
  run: TrainingRun,
  base: GgufFile,
  capability: string,
  file: string,
  library = "gemma3",
): Promise<{ rank: number; alpha: number; tensors: number; sha256: string }> {
  const result = await importPeft({
    dir: peftDir(run, capability),
    base,
    alias: capability,
    name: `weact-${library}-${file.replace(/\.gguf$/, "")}`,
    outFile: join(run.out, file),
    overwrite: true,
  });
  return { rank: result.rank, alpha: result.alpha, tensors: result.tensors, sha256: result.sha256 };
}

/**
 * The import step: each PEFT folder enters the library through the TypeScript importer (what `import-peft` runs),
 * the manifest gets the default library's entries for the stages (the capability texts the oracle's sessions
 * showed, so the adapters see at serve time the activation and release texts they trained on), and training.json
 * records the command, the data's hash, the recipe, the trainer's results and the importer's cross-check; the three
 * static merges are made from the imported adapters. `alora`: the activated LoRAs of GEMMA_ALORA_DIR, their
 * invocations recorded; no static merges (an aLoRA applies from its invocation on, a merge to every token).
 */
export async function importAdapters(run: TrainingRun, model: string, { alora = false } = {}): Promise<void> {
  const trained = JSON.parse(readFileSync(trainerRecord(run), "utf8")) as {
    seconds: number;
    results: CapabilityResult[];
  };
  const base = readGgufHeader(model);
  const imported: Record<string, unknown> = {};
  const library = alora ? "gemma3-alora" : "gemma3";
  for (const alias of ORACLE_WORKFLOW)
    imported[alias] = await importAdapter(run, base, alias, `${alias}.gguf`, library);
  writeLibraryManifest(run, model, GEMMA_STAGE_BUDGETS);
  if (!alora) writeStaticMerges(run);
  const data = createHash("sha256");
  for (const alias of ORACLE_WORKFLOW) {
    data.update(readFileSync(windowsFile(run, alias)));
    data.update(readFileSync(heldOutFile(run, alias)));
  }
  const record = {
    command: run.command,
    base: "gemma-3-270m (Q4_K_M GGUF, dequantized to F32 by transformers; frozen)",
    trainingDataSha256: data.digest("hex"),
    tasks: run.tasks,
    trainingSeconds: trained.seconds,
    recipe: { ...RECIPE, targetModules: "q,k,v,o,gate,up,down", lossMask: "the stage's own turns and exit calls" },
    ...(alora
      ? {
          variant: "activated LoRA (PEFT alora_invocation_tokens): each applies from its invocation sequence on",
          invocations: JSON.parse(readFileSync(invocationsFile(run), "utf8")) as Invocations,
        }
      : {}),
    adapters: Object.fromEntries(
      trained.results.map((t) => [t.capability, { ...t, imported: imported[t.capability] }]),
    ),
  };
  writeFileSync(run.library.training, `${JSON.stringify(record, null, 2)}\n`);
  const importCheck = await checkImport(run);
  writeFileSync(run.library.training, `${JSON.stringify({ ...record, importCheck }, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify({ ...record, importCheck })}\n`);
}
