/**
 * `npm run train-demo`: the demo library that learned. Writes the entity corpus (shipped and counterfactual) and
 * the held-out task files, plays ideal trajectories with the oracle over real sessions and tools, exports them per
 * capability (the base included) as the trainer's token windows, then trains the base and each adapter with
 * weact-train. Steps: --step data | samples (data again from the recorded traces) | train | all (default).
 * Deterministic from --seed.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { resolveConfig } from "../src/config/config.js";
import { qwen3LoraFile, qwen3ModelFile, DEMO_DIMS } from "../src/demo/qwen3.js";
import { SeededRandom } from "../src/demo/random.js";
import { buildVocabulary, SPECIAL_TOKENS, type DemoVocabulary } from "../src/demo/vocabulary.js";
import type { Conversation, TokenId } from "../src/engine/index.js";
import { readTraces } from "../src/export/readTraces.js";
import { segment } from "../src/export/segment.js";
import { GgmlType, writeGguf } from "../src/gguf/index.js";
import { runTask } from "../src/harness/runTask.js";
import { BASE_CAPABILITY } from "../src/library/manifest.js";
import { createLogger } from "../src/log.js";
import { DEFAULT_CORPUS, DEFAULT_MANIFEST, PACKAGE_ROOT, TRAINED_DIR, TRAINING_ENTITIES, trainedLibrary } from "../src/paths.js";
import { toConversation } from "../src/sessions/history.js";
import { modelFunctions } from "../src/sessions/modelFunctions.js";
import { startExportServices, startServices } from "../src/app/services.js";
import { corpusFiles, counterfactual, heldOutQuestion, neverTrained, NEVER_TRAINED_GROUP, readFacts, redrawn, trainingQuestion, type Fact } from "./pipeline/facts.js";
import { learnMerges } from "./pipeline/bpe.js";
import { OracleDriver, ORACLE_WORKFLOW } from "./pipeline/OracleDriver.js";
import { copySamples, recallSamples } from "./pipeline/recall.js";
import { tokenSample, writeSamples, type TokenSample } from "./pipeline/samples.js";

const { values } = parseArgs({
  options: {
    step: { type: "string", default: "all" },
    seed: { type: "string", default: "16" },
    tasks: { type: "string", default: "900" },
    merges: { type: "string", default: "1200" },
    threads: { type: "string", default: "2" },
    out: { type: "string", default: TRAINED_DIR },
  },
});
const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
const OUT = values.out!;
const LIBRARY = trainedLibrary(OUT);
const WORK = join(OUT, "work");
const CAPABILITIES = [BASE_CAPABILITY, ...ORACLE_WORKFLOW];

/**
 * Where node-llama-cpp's generation of a Qwen tool call switches grammars: after the name grammar's `", "arguments": `
 * (the params object starts) and after the params object (the `}\n</tool_call>` suffix). A learned token across
 * either ("Ġ{\"", ".\"}}") is one generation can never sample, and a model trained on it cannot close its call.
 */
const GRAMMAR_SEAMS = [" {", "}}"];

/**
 * The pretraining's recall and copy windows; how many of each the base's own training replays so it keeps the
 * skills; and how many copy windows each adapter's training mixes in, so no adapter unlearns reading its context.
 */
const RECALL_WINDOWS = 6000;
const RECALL_REPLAYED = 1500;
const COPY_WINDOWS = 4000;
const COPY_REPLAYED = 1000;
const COPY_PER_ADAPTER = 500;
/** The oracle's trajectories per server run; every other run searches a randomly edited corpus. */
const ORACLE_BATCH = 50;

interface Task {
  fact: Fact;
  question: string;
  policy: "soft" | "hard";
}

/** The shipped corpus's entity files, and the counterfactual corpus: the shipped one with every entity fact edited. */
function writeCorpora(facts: readonly Fact[]): void {
  rmSync(join(DEFAULT_CORPUS, "entities"), { recursive: true, force: true });
  mkdirSync(join(DEFAULT_CORPUS, "entities"), { recursive: true });
  for (const [file, text] of Object.entries(corpusFiles(facts))) writeFileSync(join(DEFAULT_CORPUS, file), text);
  writeEditedCorpus(LIBRARY.counterfactualCorpus, counterfactual(facts));
  // `weact-mcp eval OUT/eval-counterfactual.jsonl --config OUT/counterfactual.json`: its paths are the library's own,
  // so it evaluates the library beside it wherever --out put it
  const config = {
    model: { path: relative(OUT, LIBRARY.model) },
    adapters: { manifest: relative(OUT, LIBRARY.manifest) },
    tools: { search: { corpus: relative(OUT, LIBRARY.counterfactualCorpus), indexFile: relative(OUT, join(WORK, "search-index-counterfactual.json")) } },
  };
  writeFileSync(LIBRARY.counterfactualConfig, `${JSON.stringify(config, null, 2)}\n`);
}

/** A copy of the shipped corpus at `dir` whose entity files state `facts` (edited values) instead. */
function writeEditedCorpus(dir: string, facts: readonly Fact[]): void {
  rmSync(dir, { recursive: true, force: true });
  cpSync(DEFAULT_CORPUS, dir, { recursive: true });
  for (const [file, text] of Object.entries(corpusFiles(facts))) writeFileSync(join(dir, file), text);
}

/** Held-out questions: trained entities asked in phrasings training never used, and entities training never saw. */
function writeEvalTasks(facts: readonly Fact[], rng: SeededRandom): void {
  const pick = (from: Fact[], n: number) => rng.shuffled(from).slice(0, n);
  const seen = pick(
    facts.filter((f) => !neverTrained(f.entity)),
    20,
  );
  const unseen = pick(
    facts.filter((f) => neverTrained(f.entity)),
    16,
  );
  const edited = new Map(counterfactual(facts).map((f, i) => [facts[i]!, f.value]));
  // the never-trained facts are a group of their own: the table reports them apart from the trained ones
  const line = (f: Fact, i: number, prefix: string, answer: string) =>
    JSON.stringify({ id: `${prefix}-${i + 1}`, task: heldOutQuestion(f, i), answer, stages: [...ORACLE_WORKFLOW], ...(prefix === "unseen" ? { group: NEVER_TRAINED_GROUP } : {}) });
  const rows = [...seen.map((f, i) => line(f, i, "seen", f.value)), ...unseen.map((f, i) => line(f, i, "unseen", f.value))];
  writeFileSync(LIBRARY.evalTasks, `${rows.join("\n")}\n`);
  const cf = [...seen.map((f, i) => line(f, i, "seen", edited.get(f)!)), ...unseen.map((f, i) => line(f, i, "unseen", edited.get(f)!))];
  writeFileSync(LIBRARY.counterfactualTasks, `${cf.join("\n")}\n`);
}

function trainingTasks(facts: readonly Fact[], rng: SeededRandom, count: number): Task[] {
  const trained = rng.shuffled(facts.filter((f) => !neverTrained(f.entity)));
  return Array.from({ length: count }, (_, i) => {
    const fact = trained[i % trained.length]!;
    return { fact, question: trainingQuestion(fact, Math.floor(rng.next() * 3)), policy: i % 3 === 2 ? "hard" : "soft" };
  });
}

/** The config of the pipeline's own sessions: the oracle's runs, and the rendering of their samples. */
function pipelineConfig(traceDir: string, opts: { modelPath?: string; corpus?: string } = {}) {
  return resolveConfig(
    {
      // room for a whole trajectory in the random demo model's byte tokens: at 4096 the harness elided search
      // results to make room, and the search stage learned to write evidence it could not see
      model: { gpu: false, threads: Number(values.threads), contextSize: 8192, ...(opts.modelPath ? { path: opts.modelPath } : { demo: "random" }) },
      cache: { background: false },
      sessions: { keepToolResults: 1000 },
      harness: { traceDir, maxTraceFiles: 100_000 },
      // the default tools (top_k included: its default is in the search function's doc): the function docs and the
      // results the samples render are the ones a default server shows
      tools: { search: opts.corpus ? { corpus: opts.corpus, indexFile: join(WORK, "search-index-edited.json") } : { indexFile: join(WORK, "search-index.json") } },
    },
    "train-demo",
    PACKAGE_ROOT,
  );
}

/**
 * Runs the oracle over every task on a server session (demo weights: the oracle writes every turn) into
 * `traceDir`, in batches; every other batch searches a corpus whose facts were all redrawn at random (a fresh
 * draw per batch), so half the evidence the stages learn to pass on contradicts anything they could remember.
 */
async function recordTrajectories(tasks: readonly Task[], facts: readonly Fact[], rng: SeededRandom, traceDir: string): Promise<void> {
  rmSync(traceDir, { recursive: true, force: true });
  // a fresh index: one persisted by an earlier run ranked some lower results differently (12 of 900 trajectories)
  rmSync(join(WORK, "search-index.json"), { force: true });
  const owner = "train-demo";
  const started = Date.now();
  for (let from = 0; from < tasks.length; from += ORACLE_BATCH) {
    const edited = (from / ORACLE_BATCH) % 2 === 1 ? redrawn(facts, rng) : undefined;
    const corpus = join(WORK, "edited-corpus");
    if (edited) {
      writeEditedCorpus(corpus, edited);
      rmSync(join(WORK, "search-index-edited.json"), { force: true });
    }
    const stated = new Map((edited ?? facts).map((f) => [`${f.doc}/${f.relation}`, f.value]));
    const services = await startServices(pipelineConfig(traceDir, edited ? { corpus } : {}), logger);
    try {
      for (const task of tasks.slice(from, from + ORACLE_BATCH)) {
        const expected = stated.get(`${task.fact.doc}/${task.fact.relation}`);
        await runTask(services.harness, owner, { task: task.question, policy: task.policy }, { expected, teacher: (d) => new OracleDriver(d, services.sessions, owner, d.sessionId, task.fact) });
      }
    } finally {
      await services.dispose();
    }
    logger.warn({ done: Math.min(tasks.length, from + ORACLE_BATCH), of: tasks.length, seconds: Math.round((Date.now() - started) / 1000) }, "oracle trajectories");
  }
}

/**
 * Each capability's stage samples of the traces (export's segmentation), as token windows of the model at
 * `model` (its tokenizer and chat template), with the functions the sessions documented, and the pretraining
 * windows its `windows` callback tokenizes; also the whole rendered trajectories as text (what the vocabulary is
 * learned from).
 */
async function renderTraces(
  traceDir: string,
  model?: { path: string; vocab: DemoVocabulary; windows: (tokenize: (text: string) => TokenId[]) => Record<string, TokenSample[]> },
): Promise<{ samples: Record<string, TokenSample[]>; texts: string[] }> {
  const { runtime, toolbox, dispose } = await startExportServices(pipelineConfig(traceDir, { modelPath: model?.path }), logger);
  try {
    const functions = modelFunctions(runtime.library, toolbox.modelFunctions());
    const renderer = { renderTokens: (c: Conversation) => runtime.engine.renderTokens(c), endOfTurn: (model?.vocab ?? buildVocabulary()).idOf("<|im_end|>") };
    // in the order of their questions (one trajectory per question), not of their trace files' random names: the
    // vocabulary's merges and the windows then follow from the trajectories alone, the same on every run
    const { trajectories, problems } = readTraces(traceDir);
    const question = (t: (typeof trajectories)[number]) => t.messages.find((m) => m.role === "user")?.content ?? "";
    trajectories.sort((a, b) => (question(a) < question(b) ? -1 : question(a) > question(b) ? 1 : 0));
    if (problems.length) throw new Error(`oracle traces have problems: ${problems.map((p) => p.message).join("; ")}`);
    const elided = trajectories.filter((t) => t.messages.some((m) => m.role === "tool" && m.elided));
    if (elided.length) throw new Error(`${elided.length} oracle traces had a tool result elided for room (${elided[0]!.file}): raise model.contextSize in train-demo's pipelineConfig`);
    const texts = trajectories.map((t) => runtime.engine.detokenize(runtime.engine.renderTokens(toConversation(t.messages, functions, t.keepToolResult))));
    const samples: Record<string, TokenSample[]> = {};
    for (const capability of CAPABILITIES) {
      samples[capability] = trajectories.flatMap((t) =>
        segment(t, capability).map((s) => {
          const after = t.messages.slice(s.messages.length);
          const stop = after.findIndex((m) => m.role !== "tool");
          return tokenSample(s, functions, renderer, stop < 0 ? after : after.slice(0, stop));
        }),
      );
    }
    if (model)
      Object.assign(
        samples,
        model.windows((text) => runtime.engine.tokenize(text)),
      );
    return { samples, texts };
  } finally {
    await dispose();
  }
}

function trainerBinary(): string {
  const dir = execFileSync("bash", [join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), "--program", join(PACKAGE_ROOT, "training", "trainer")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
    .trim()
    .split("\n")
    .at(-1)!;
  return join(dir, "weact-train");
}

/**
 * Per model: the learning rate and the passes over its windows. `copy` is the pretraining's first phase: copying
 * alone, until the model has learned it (held-out copy accuracy 70% after one pass, 99% after three), and only then
 * recall with copying mixed in. Started from random weights on both at once, the pretraining copied 77-84% of
 * held-out windows, by how the vocabulary and the shuffle fell, and the search stage's handoff swung with it: two
 * runs that differed only in their vocabulary scored 47% and 19% under hard. From a model that copies, recall
 * reached 89% where it had reached 72-76%. The base's own turns then take one pass (100% of held-out targets after
 * it), which pays for the copying's time: 45 minutes in all on 2 cores.
 */
const TRAINING: Readonly<Record<string, { lr: number; epochs: number }>> = {
  copy: { lr: 3e-3, epochs: 3 },
  recall: { lr: 3e-3, epochs: 1 },
  base: { lr: 3e-3, epochs: 1 },
  plan: { lr: 3e-3, epochs: 2 },
  search: { lr: 3e-3, epochs: 2 },
  write: { lr: 3e-3, epochs: 2 },
};
const ADAPTER_RANK = 32;

function train(): void {
  const trainer = trainerBinary();
  const threads = ["--threads", values.threads!];
  const json = <T>(args: string[]) =>
    JSON.parse(
      execFileSync(trainer, [...args, ...threads], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
        .trim()
        .split("\n")
        .at(-1)!,
    ) as T;
  const fit = (args: string[], hp: { lr: number; epochs: number }) =>
    json<{ steps: number; tokens: number; seconds: number }>([...args, "--seed", values.seed!, "--batch", "4", "--log-every", "25", "--lr", String(hp.lr), "--epochs", String(hp.epochs)]);
  const score = (args: string[], capability: string) => json<{ samples: number; targets: number; loss: number; accuracy: number }>([...args, "--eval", join(WORK, `${capability}.held.bin`)]);
  const base = LIBRARY.model;
  // every model is also scored on held-out copy windows: a stage that cannot copy cannot read its context
  const report: Record<string, { training: unknown; heldOut: unknown; copyHeldOut: unknown; bytes: number }> = {};
  const started = Date.now();
  const copier = join(WORK, "copier.gguf");
  const copy = fit(["--model", join(WORK, "init.gguf"), "--data", join(WORK, "copy.bin"), "--out", copier], TRAINING.copy!);
  const copied = score(["--model", copier], "copy");
  report.copy = { training: copy, heldOut: copied, copyHeldOut: copied, bytes: statSync(copier).size };
  const pretrained = join(WORK, "pretrained.gguf");
  const recall = fit(["--model", copier, "--data", join(WORK, "recall.bin"), "--out", pretrained], TRAINING.recall!);
  report.recall = { training: recall, heldOut: score(["--model", pretrained], "recall"), copyHeldOut: score(["--model", pretrained], "copy"), bytes: statSync(pretrained).size };
  const training = fit(["--model", pretrained, "--data", join(WORK, "base.bin"), "--out", base], TRAINING.base!);
  report.base = { training, heldOut: score(["--model", base], "base"), copyHeldOut: score(["--model", base], "copy"), bytes: statSync(base).size };
  for (const alias of ORACLE_WORKFLOW) {
    const init = join(WORK, `${alias}-init.gguf`);
    // B = 0: the adapter starts as the base itself
    const lora = qwen3LoraFile({ name: `weact-demo-trained-${alias}`, dims: DEMO_DIMS, rank: ADAPTER_RANK, seed: Number(values.seed) + alias.length, strength: 0 });
    writeGguf(init, lora.metadata, lora.tensors);
    const out = join(OUT, `${alias}.gguf`);
    const training = fit(["--model", base, "--lora", init, "--data", join(WORK, `${alias}.bin`), "--out", out], TRAINING[alias]!);
    report[alias] = { training, heldOut: score(["--model", base, "--lora", out], alias), copyHeldOut: score(["--model", base, "--lora", out], "copy"), bytes: statSync(out).size };
  }
  writeLibraryManifest();
  const data = createHash("sha256");
  for (const capability of ["copy", "recall", ...CAPABILITIES]) data.update(readFileSync(join(WORK, `${capability}.bin`)));
  const record = {
    command: `npm run train-demo -- --seed ${values.seed} --tasks ${values.tasks} --merges ${values.merges} --threads ${values.threads}`,
    trainingDataSha256: data.digest("hex"),
    seconds: Math.round((Date.now() - started) / 1000),
    hyperparameters: { ...TRAINING, adapterRank: ADAPTER_RANK },
    models: report,
  };
  writeFileSync(LIBRARY.training, `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(record)}\n`);
}

/** The trained library's manifest: the default library's entries (the same capability texts the oracle's sessions showed), on the trained files. */
function writeLibraryManifest(): void {
  const defaults = JSON.parse(readFileSync(DEFAULT_MANIFEST, "utf8")) as { adapters: { alias: string; file: string }[] };
  const adapters = defaults.adapters.filter((a) => (ORACLE_WORKFLOW as readonly string[]).includes(a.alias)).map((a) => ({ ...a, file: `${a.alias}.gguf` }));
  writeFileSync(LIBRARY.manifest, `${JSON.stringify({ adapters }, null, 2)}\n`);
}

async function main() {
  mkdirSync(WORK, { recursive: true });
  const rng = new SeededRandom(Number(values.seed));
  const recording = values.step === "data" || values.step === "all";
  if (recording || values.step === "samples") {
    const facts = readFacts(TRAINING_ENTITIES);
    writeCorpora(facts);
    writeEvalTasks(facts, rng);
    const tasks = trainingTasks(facts, rng, Number(values.tasks));
    const traceDir = join(WORK, "traces");
    // the edits draw from a generator of their own, so --step samples renders the same windows as a full run
    if (recording) await recordTrajectories(tasks, facts, new SeededRandom(Number(values.seed) + 1), traceDir);
    // the vocabulary: byte-level BPE learned from the trajectories as the demo model's byte tokens render them
    const { texts } = await renderTraces(traceDir);
    const merges = learnMerges(texts, Number(values.merges), GRAMMAR_SEAMS);
    const vocab = buildVocabulary(SPECIAL_TOKENS, merges);
    const init = qwen3ModelFile({ name: "weact-demo-trained", dims: DEMO_DIMS, vocab, seed: Number(values.seed), weightType: GgmlType.F32, outputFromEmbedding: true });
    writeGguf(join(WORK, "init.gguf"), init.metadata, init.tensors);
    const windows = (tokenize: (text: string) => TokenId[]) => ({ recall: recallSamples(facts, tokenize, rng, RECALL_WINDOWS), copy: copySamples(facts, tokenize, rng, COPY_WINDOWS) });
    const { samples } = await renderTraces(traceDir, { path: join(WORK, "init.gguf"), vocab, windows });
    // every 20th window is held out: the trainer's own loss and accuracy on windows it never trained on
    const split = (list: readonly TokenSample[]) => ({ training: list.filter((_, i) => i % 20 !== 19), held: list.filter((_, i) => i % 20 === 19) });
    // the pretraining reads and copies; the base's training replays some of both, each adapter's some copying
    const copy = split(samples.copy!).training;
    const mixedIn = (capability: string): TokenSample[] => {
      if (capability === "recall") return copy;
      if (capability === BASE_CAPABILITY) return [...split(samples.recall!).training.slice(0, RECALL_REPLAYED), ...copy.slice(0, COPY_REPLAYED)];
      return (ORACLE_WORKFLOW as readonly string[]).includes(capability) ? copy.slice(0, COPY_PER_ADAPTER) : [];
    };
    for (const [capability, list] of Object.entries(samples)) {
      const { training, held } = split(list);
      writeSamples(join(WORK, `${capability}.bin`), [...training, ...mixedIn(capability)]);
      writeSamples(join(WORK, `${capability}.held.bin`), held);
      const lengths = list.map((s) => s.tokens.length);
      process.stdout.write(
        `${JSON.stringify({ capability, samples: list.length, meanTokens: Math.round(lengths.reduce((a, b) => a + b, 0) / Math.max(1, lengths.length)), maxTokens: Math.max(0, ...lengths), targets: list.reduce((n, s) => n + s.mask.reduce((a, b) => a + b, 0), 0) })}\n`,
      );
    }
  }
  if (values.step === "train" || values.step === "all") train();
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(1);
});
