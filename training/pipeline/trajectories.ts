import { rmSync } from "node:fs";
import { join } from "node:path";
import { startExportServices, startServices } from "../../src/composition/services.js";
import { resolveConfig } from "../../src/config/loadConfig.js";
import type { SeededRandom } from "../../src/demo/random.js";
import { buildVocabulary } from "../../src/demo/vocabulary.js";
import type { Conversation, TokenId } from "../../src/engine/index.js";
import { readTraces } from "../../src/export/readTraces.js";
import type { Trajectory } from "../../src/export/recordedTrajectory.js";
import { segment } from "../../src/export/segment.js";
import { runTask } from "../../src/harness/runTaskUnderPolicy.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { toConversation } from "../../src/sessions/history.js";
import { modelFunctions } from "../../src/sessions/modelFunctions.js";
import { writeEditedCorpus } from "./corpora.js";
import { redrawn, type Fact } from "./facts.js";
import { differenceValue } from "./computation.js";
import { OracleDriver, type OracleStyle } from "./OracleDriver.js";
import { CAPABILITIES, type TrainingRun } from "./run.js";
import { tokenSample, type TokenSample } from "./samples.js";
import type { Task } from "./tasks.js";

/** The oracle's trajectories per server run; every other run searches a randomly edited corpus. */
const ORACLE_BATCH = 50;

/** The config of the pipeline's own sessions: the oracle's runs, and the rendering of their samples. */
export function pipelineConfig(
  run: TrainingRun,
  traceDir: string,
  opts: { modelPath?: string; chatTemplate?: "jinja"; manifest?: string; corpus?: string } = {},
) {
  return resolveConfig(
    {
      // room for a whole trajectory in the random demo model's byte tokens: at 4096 the harness elided search
      // results to make room, and the search stage learned to write evidence it could not see
      model: {
        gpu: false,
        threads: run.threads,
        contextSize: 8192,
        ...(opts.modelPath ? { path: opts.modelPath } : { demo: "random" }),
        ...(opts.chatTemplate ? { chatTemplate: opts.chatTemplate } : {}),
      },
      // the library whose adapters the function docs list: one that fits the model rendering them
      ...(opts.manifest ? { adapters: { manifest: opts.manifest } } : {}),
      cache: { background: false },
      sessions: { keepToolResults: 1000 },
      harness: { traceDir, maxTraceFiles: 100_000 },
      // the default tools (top_k included: its default is in the search function's doc): the function docs and the
      // results the samples render are the ones a default server shows
      tools: {
        search: opts.corpus
          ? { corpus: opts.corpus, indexFile: join(run.work, "search-index-edited.json") }
          : { indexFile: join(run.work, "search-index.json") },
      },
    },
    "train-demo",
    PACKAGE_ROOT,
  );
}

/**
 * Runs the oracle over every task on a server session (demo weights: the oracle writes every turn) into
 * `traceDir`, in batches; every other batch searches a corpus whose facts were all redrawn at random (a fresh
 * draw per batch), so half the evidence the stages learn to pass on contradicts anything they could remember.
 * `counterfactual: false` keeps the default corpus for every batch: a task with a `target` knows its answer's span,
 * which a redrawn record no longer states.
 */
export async function recordTrajectories(
  run: TrainingRun,
  tasks: readonly Task[],
  facts: readonly Fact[],
  rng: SeededRandom,
  traceDir: string,
  opts: { manifest?: string; style?: OracleStyle; counterfactual?: boolean } = {},
): Promise<void> {
  const { logger } = run;
  rmSync(traceDir, { recursive: true, force: true });
  // a fresh index: one persisted by an earlier run ranked some lower results differently (12 of 900 trajectories)
  rmSync(join(run.work, "search-index.json"), { force: true });
  const owner = "train-demo";
  const started = Date.now();
  for (let from = 0; from < tasks.length; from += ORACLE_BATCH) {
    const edited = opts.counterfactual !== false && (from / ORACLE_BATCH) % 2 === 1 ? redrawn(facts, rng) : undefined;
    const corpus = join(run.work, "edited-corpus");
    if (edited) {
      writeEditedCorpus(corpus, edited);
      rmSync(join(run.work, "search-index-edited.json"), { force: true });
    }
    const stated = new Map((edited ?? facts).map((f) => [`${f.doc}/${f.relation}`, f.value]));
    const value = (f: Fact) => stated.get(`${f.doc}/${f.relation}`);
    const services = await startServices(
      pipelineConfig(run, traceDir, { manifest: opts.manifest, ...(edited ? { corpus } : {}) }),
      logger,
    );
    try {
      for (const task of tasks.slice(from, from + ORACLE_BATCH)) {
        const { difference, slip, target } = task;
        const expected = target
          ? target.answer
          : difference
            ? differenceValue(value(difference.first)!, value(difference.second)!)
            : value(task.fact);
        // a hard run prescribes its workflow; in a soft run the oracle's base chooses it
        const prescribed = task.policy === "hard" && task.workflow ? { workflow: [...task.workflow] } : {};
        const chosen = task.policy === "soft" && task.workflow ? { workflow: task.workflow } : {};
        await runTask(
          services.harness,
          owner,
          { task: task.question, policy: task.policy, ...prescribed },
          {
            expected,
            teacher: (d) =>
              new OracleDriver(
                d,
                services.sessions,
                owner,
                d.sessionId,
                { fact: task.fact, difference, slip, target, ...chosen },
                opts.style,
              ),
          },
        );
      }
    } finally {
      await services.dispose();
    }
    logger.warn(
      {
        done: Math.min(tasks.length, from + ORACLE_BATCH),
        of: tasks.length,
        seconds: Math.round((Date.now() - started) / 1000),
      },
      "oracle trajectories",
    );
  }
}

/**
 * Each capability's stage samples of the traces (export's segmentation), as token windows of the model at
 * `model` (its tokenizer and chat template), with the functions the sessions documented, and the pretraining
 * windows its `windows` callback tokenizes; also the whole rendered trajectories as text (what the vocabulary is
 * learned from). Without `model`, the random demo model's byte tokens render them.
 */
export async function renderTraces(
  run: TrainingRun,
  traceDir: string,
  model?: {
    path: string;
    /** The chat template's end-of-turn token in that model's vocabulary. */
    endOfTurn: TokenId;
    /** The text opening a function result inside the model's turn, for templates that put results there. */
    resultOpening?: string;
    /** A library for that model with the same aliases and texts as the one the traces were recorded on. */
    manifest?: string;
    /** model.chatTemplate of the sessions that will serve the samples' adapters. */
    chatTemplate?: "jinja";
    /** Called with each sample and the conversation it renders (what a check against the model's template reads). */
    check?: (sample: TokenSample, conversation: Conversation, where: string) => void;
    windows?: (tokenize: (text: string) => TokenId[]) => Record<string, TokenSample[]>;
  },
  capabilities: readonly string[] = CAPABILITIES,
): Promise<{ samples: Record<string, TokenSample[]>; texts: string[] }> {
  const { runtime, toolbox, dispose } = await startExportServices(
    pipelineConfig(run, traceDir, {
      modelPath: model?.path,
      manifest: model?.manifest,
      ...(model?.chatTemplate ? { chatTemplate: model.chatTemplate } : {}),
    }),
    run.logger,
  );
  try {
    // each trajectory's prompt as its session showed it (a hard run lists only its workflow's capabilities)
    const functionsOf = (t: { capabilities?: readonly string[] }) =>
      modelFunctions(runtime.library, toolbox.modelFunctions(), t.capabilities);
    const renderer = {
      renderTokens: (c: Conversation) => runtime.engine.renderTokens(c),
      endOfTurn: model?.endOfTurn ?? buildVocabulary().idOf("<|im_end|>"),
      resultOpening: model?.resultOpening === undefined ? undefined : runtime.engine.tokenize(model.resultOpening),
    };
    // in the order of their questions (one trajectory per question), not of their trace files' random names: the
    // vocabulary's merges and the windows then follow from the trajectories alone, the same on every run
    const trajectories = oracleTraces(traceDir);
    const elided = trajectories.filter((t) => t.messages.some((m) => m.role === "tool" && m.elided));
    if (elided.length)
      throw new Error(
        `${elided.length} oracle traces had a tool result elided for room (${elided[0]!.file}): raise model.contextSize in training/pipeline/trajectories.ts's pipelineConfig`,
      );
    const texts = trajectories.map((t) =>
      runtime.engine.detokenize(
        runtime.engine.renderTokens(toConversation(t.messages, functionsOf(t), t.keepToolResult)),
      ),
    );
    const samples: Record<string, TokenSample[]> = {};
    for (const capability of capabilities) {
      samples[capability] = trajectories.flatMap((t) =>
        segment(t, capability).map((s) => {
          const after = t.messages.slice(s.messages.length);
          const stop = after.findIndex((m) => m.role !== "tool");
          const following = stop < 0 ? after : after.slice(0, stop);
          const sample = tokenSample(s, functionsOf(t), renderer, following);
          const results = following.filter((m) => m.role === "tool");
          model?.check?.(sample, toConversation([...s.messages, ...results], functionsOf(t), s.keepToolResult), t.id);
          return sample;
        }),
      );
    }
    if (model?.windows)
      Object.assign(
        samples,
        model.windows((text) => runtime.engine.tokenize(text)),
      );
    return { samples, texts };
  } finally {
    await dispose();
  }
}

/**
 * The oracle's trajectories in `traceDir`, in the order of their questions (one trajectory per question), not of their
 * trace files' random names: what is made of them then follows from the trajectories alone, the same on every run.
 * Throws on a trace that does not read.
 */
export function oracleTraces(traceDir: string): Trajectory[] {
  const { trajectories, problems } = readTraces(traceDir);
  if (problems.length) throw new Error(`oracle traces have problems: ${problems.map((p) => p.message).join("; ")}`);
  const question = (t: Trajectory) => t.messages.find((m) => m.role === "user")?.content ?? "";
  return trajectories.sort((a, b) => (question(a) < question(b) ? -1 : question(a) > question(b) ? 1 : 0));
}
