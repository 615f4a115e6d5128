import { Template } from "@huggingface/jinja";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureDemoWeights } from "../../src/demo/ensure.js";
import { SeededRandom } from "../../src/demo/random.js";
import { commonPrefixLength, type Conversation, type TokenId } from "../../src/engine/index.js";
import { segment, type StageSample } from "../../src/export/segment.js";
import { metaString, readGgufHeader } from "../../src/gguf/index.js";
import { Toolbox } from "../../src/externalTools/Toolbox.js";
import { BASE_CAPABILITY } from "../../src/library/manifest.js";
import { LlamaChatCodec } from "../../src/llamaCpp/LlamaChatCodec.js";
import { serverPaths } from "../../src/composition/services.js";
import { toConversation, type HistoryMessage } from "../../src/sessions/history.js";
import { weightFunctions } from "../../src/library/weightActions.js";
import { hfChat } from "../../testkit/hfMessages.js";
import { COMPUTATION_WORKFLOW, ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { workManifest } from "../pipeline/continueTraining.js";
import { computationTasks, trainingTasks, type Task } from "../pipeline/tasks.js";
import { heldOutQuestion, neverTrained, readFacts, type Fact } from "../pipeline/facts.js";
import { drawDifferences, heldOutDifferenceQuestion, neverTrainedPair } from "../pipeline/computation.js";
import { TRAINING_ENTITIES } from "../pipeline/paths.js";
import { heldOutFile, windowsFile, type TrainingRun } from "../pipeline/run.js";
import { SampleRenderError, tokenSample, writeSamples, type Renderer, type TokenSample } from "../pipeline/samples.js";
import { oracleTraces, pipelineConfig, recordTrajectories } from "../pipeline/trajectories.js";
import { drawLibrary, renameHistory, type ShownCapability, type Split } from "./capabilities.js";

/** Libraries drawn per recorded trajectory: more distinct trajectories teach more than one read through several lists. */
const LIBRARIES_PER_TRAJECTORY = 1;
/** Of the trajectories, the share whose library has no planning capability: the base then starts with search. */
const WITHOUT_PLAN = 0.2;
/** Of the questions, the share that asks for a difference of two values: the code capability comes before write. */
const COMPUTATION = 0.3;

/** The base-state samples' files in the work folder, as train_lora.py reads them. */
export const chooserSamples = (run: TrainingRun) => ({
  training: windowsFile(run, BASE_CAPABILITY),
  held: heldOutFile(run, BASE_CAPABILITY),
  /** The held-out histories as the decision check replays them (ChooserHistory per line). */
  histories: join(run.work, "held-out.jsonl"),
});

/** The SHA-256 of the samples, training then held out: what a training record names its data by. */
export function chooserDataSha256(run: TrainingRun): string {
  const files = chooserSamples(run);
  return createHash("sha256").update(readFileSync(files.training)).update(readFileSync(files.held)).digest("hex");
}

/** A held-out history as its session showed it: the library drawn for it, and the messages under its aliases. */
export interface ChooserHistory {
  id: string;
  library: ShownCapability[];
  messages: HistoryMessage[];
}

/** The roles a question's trajectory goes through, with or without the planning stage. */
function workflowOf(computation: boolean, withPlan: boolean): string[] {
  const all: readonly string[] = computation ? COMPUTATION_WORKFLOW : ORACLE_WORKFLOW;
  return withPlan ? [...all] : all.filter((r) => r !== "plan");
}

/** Soft questions the oracle's base answers by loading its workflow in turn; `held`: phrasings training never used. */
function chooserTasks(facts: readonly Fact[], rng: SeededRandom, count: number, held: boolean): Task[] {
  const differences = Math.round(count * COMPUTATION);
  const facts1: Task[] = held
    ? rng
        .shuffled(facts.filter((f) => neverTrained(f.entity)))
        .slice(0, count - differences)
        .map((fact, i) => ({ fact, question: heldOutQuestion(fact, i), policy: "soft" as const }))
    : trainingTasks(facts, rng, count - differences).map((t) => ({ ...t, policy: "soft" as const }));
  const diffs: Task[] = held
    ? drawDifferences(facts, rng, differences, neverTrainedPair).map((difference, i) => ({
        fact: difference.first,
        difference,
        question: heldOutDifferenceQuestion(difference, i),
        policy: "soft" as const,
      }))
    : computationTasks(facts, rng, differences, { slips: false }).map((t) => ({ ...t, policy: "soft" as const }));
  return [...facts1, ...diffs].map((t) => ({
    ...t,
    workflow: workflowOf(t.difference !== undefined, rng.next() >= WITHOUT_PLAN),
  }));
}

/**
 * The data step of the chooser: the oracle plays soft trajectories on the demo server (its base loads the workflow's
 * capabilities in turn, then ends its turn), and each trajectory is read through libraries drawn at random
 * (capabilities.ts), rendered as the server renders them for Qwen2.5-Coder-0.5B-Instruct (model.chatTemplate "jinja"):
 * one sample per trajectory and library, whose targets are the base's own turns. Training questions and libraries
 * give base.bin; held-out questions under held-out aliases and descriptions give base.held.bin. Every sample is
 * checked token for token against the model's own Jinja template. Returns the data's SHA-256 and sizes.
 */
export async function writeChooserData(
  run: TrainingRun,
  model: string,
  heldTasks: number,
  { record }: { record: boolean },
): Promise<Record<string, unknown>> {
  const rng = new SeededRandom(run.seed);
  const facts = readFacts(TRAINING_ENTITIES);
  const training = chooserTasks(facts, rng, run.tasks, false);
  const held = chooserTasks(facts, rng, heldTasks, true);
  const demo = ensureDemoWeights(run.logger);
  const recording = workManifest(run, "recording", true, (alias) => demo.adapters[alias]!);
  const traceDir = (split: Split) => join(run.work, "traces", split);
  if (record) {
    await recordTrajectories(run, training, facts, new SeededRandom(run.seed + 1), traceDir("training"), {
      manifest: recording,
    });
    await recordTrajectories(run, held, facts, new SeededRandom(run.seed + 2), traceDir("held-out"), {
      manifest: recording,
    });
  }
  const render = await chooserRendering(run, model);
  try {
    const libraries = new SeededRandom(run.seed + 3);
    const sets = {
      training: render.samples(traceDir("training"), "training", libraries, LIBRARIES_PER_TRAJECTORY),
      "held-out": render.samples(traceDir("held-out"), "held-out", libraries, 1),
    };
    const files = chooserSamples(run);
    writeSamples(files.training, sets.training.samples);
    writeSamples(files.held, sets["held-out"].samples);
    writeFileSync(files.histories, sets["held-out"].histories.map((h) => `${JSON.stringify(h)}\n`).join(""));
    const sizes = Object.fromEntries(
      Object.entries(sets).map(([name, { samples: list }]) => [
        name,
        {
          samples: list.length,
          tokens: list.reduce((n, s) => n + s.tokens.length, 0),
          maxTokens: Math.max(0, ...list.map((s) => s.tokens.length)),
          targets: list.reduce((n, s) => n + s.mask.reduce((a, b) => a + b, 0), 0),
        },
      ]),
    );
    return { sha256: chooserDataSha256(run), ...sizes };
  } finally {
    await render.dispose();
  }
}

/** Renders recorded trajectories through drawn libraries as base samples, as the server renders them for `model`. */
async function chooserRendering(run: TrainingRun, model: string) {
  const codec = await LlamaChatCodec.load({ modelPath: model, logger: run.logger, chatTemplate: "jinja" });
  const config = pipelineConfig(run, join(run.work, "traces"));
  const toolbox = await Toolbox.create(config.tools, run.logger, { private: serverPaths(config) });
  const renderer = { renderTokens: (c: Conversation) => codec.renderTokens(c), endOfTurn: qwenEndOfTurn(model, codec) };
  const check = templateCheck(model, codec);
  return {
    samples(
      traceDir: string,
      split: Split,
      rng: SeededRandom,
      perTrajectory: number,
    ): { samples: TokenSample[]; histories: ChooserHistory[] } {
      const trajectories = oracleTraces(traceDir);
      const out: TokenSample[] = [];
      const histories: ChooserHistory[] = [];
      for (const t of trajectories) {
        const loaded = t.messages.flatMap((m) =>
          m.role === "assistant" ? m.toolCalls.filter((c) => c.name === "load_lora") : [],
        );
        const needs = loaded.map((c) => String(c.arguments.adapter));
        for (let k = 0; k < perTrajectory; k++) {
          const library = drawLibrary(rng, needs, split);
          const messages = renameHistory(t.messages, library);
          histories.push({ id: t.id, library, messages });
          const functions = { ...weightFunctions(library), ...toolbox.modelFunctions() };
          for (const s of segment({ ...t, messages }, BASE_CAPABILITY)) {
            const sample = closedSample(s, functions, renderer);
            const conversation = toConversation(s.messages, functions, s.keepToolResult);
            check(sample, conversation, `${t.id} (${split})`);
            out.push(sample);
          }
        }
      }
      return { samples: out, histories };
    },
    async dispose() {
      toolbox.close();
      await codec.dispose();
    },
  };
}

/**
 * tokenSample, where the base's last turn may be the one that ends the run: no text, no call (the oracle's turn
 * after the write stage released). The engine renders a history ending with an assistant turn as that turn still
 * being written, so that turn's target is the end-of-turn token right after the turn's opening, as the model writes it
 * when asked.
 */
function closedSample(s: StageSample, functions: Conversation["functions"], renderer: Renderer): TokenSample {
  const last = s.messages[s.targets.at(-1)!]!;
  const ends = last.role === "assistant" && last.content === "" && last.toolCalls.length === 0;
  if (!ends || s.targets.length < 2) return tokenSample(s, functions, renderer);
  const before = s.messages.slice(0, -1);
  const sample = tokenSample({ ...s, messages: before, targets: s.targets.slice(0, -1) }, functions, renderer);
  const prompt = renderer.renderTokens(toConversation(before, functions, s.keepToolResult));
  if (commonPrefixLength(prompt, sample.tokens) !== sample.tokens.length)
    throw new SampleRenderError(`${s.trajectory}: the base's last turn does not follow its earlier ones`);
  const mask = new Uint8Array(prompt.length + 1);
  mask.set(sample.mask);
  mask[prompt.length] = 1;
  return { tokens: [...prompt, renderer.endOfTurn], mask };
}

/** Qwen's end-of-turn token in `codec`'s vocabulary; throws on a model whose `<|im_end|>` is not one token. */
export function qwenEndOfTurn(model: string, codec: { tokenize(text: string, special: boolean): TokenId[] }): TokenId {
  const endOfTurn = codec.tokenize("<|im_end|>", true);
  if (endOfTurn.length !== 1) throw new Error(`${model}: <|im_end|> is not one token: not a Qwen chat model`);
  return endOfTurn[0]!;
}

/**
 * A check that a sample's tokens are the model's own template's, token for token (what Hugging Face's
 * apply_chat_template and the tokenizer give, as test/engine/qwen-render.test.ts checks for a hard run): the
 * template's rendering of the conversation up to the last target starts with them. It throws where they part.
 */
export function templateCheck(
  model: string,
  codec: { tokenize(text: string, special: boolean): TokenId[] },
): (sample: TokenSample, conversation: Conversation, where: string) => void {
  const template = new Template(metaString(readGgufHeader(model), "tokenizer.chat_template")!);
  return (sample, conversation, where) => {
    const expected = codec.tokenize(
      template.render({
        ...hfChat(conversation),
        add_generation_prompt: false,
        bos_token: "",
        eos_token: "<|im_end|>",
      }),
      true,
    );
    const common = commonPrefixLength(sample.tokens, expected);
    if (common !== sample.tokens.length)
      throw new Error(
        `${where}: the engine's rendering parts from the model's Jinja template at token ${common} of ${sample.tokens.length}`,
      );
  };
}
