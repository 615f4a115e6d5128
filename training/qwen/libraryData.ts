/**
 * The data step of the Qwen capability library: the oracle plays questions of the library's files (records and prose,
 * one hop or two, any wording) on the demo server, under the hard and the soft policy, and each stage's turns become
 * its capability's samples, rendered as the server renders them for the Qwen backbone (model.chatTemplate "jinja")
 * and checked token for token against the model's own Jinja template.
 */
import { join } from "node:path";
import { SeededRandom } from "../../src/demo/random.js";
import { LocalIndex } from "../../src/externalTools/search/LocalIndex.js";
import { LlamaChatCodec } from "../../src/llamaCpp/LlamaChatCodec.js";
import type { TokenId } from "../../src/engine/index.js";
import { DEFAULT_CORPUS } from "../../src/paths.js";
import { qwenTestAdapters } from "../../testkit/realModelAdapters.js";
import { writeStageSamples } from "../gemma/data.js";
import { readFacts } from "../pipeline/facts.js";
import { ORACLE_WORKFLOW } from "../pipeline/OracleDriver.js";
import { TRAINING_ENTITIES } from "../pipeline/paths.js";
import type { TokenSample } from "../pipeline/samples.js";
import type { TrainingRun } from "../pipeline/run.js";
import type { Task } from "../pipeline/tasks.js";
import { recordTrajectories, renderTraces } from "../pipeline/trajectories.js";
import { qwenEndOfTurn, templateCheck } from "./data.js";
import { readQuestions, type Question } from "./questions.js";
import { questionTask } from "./tasks.js";

/** The share of each kind of question among the drawn tasks: prose carries the everyday wordings, records the forms. */
const MIX = { recordOneHop: 0.35, recordTwoHops: 0.15, proseOneHop: 0.35, proseTwoHops: 0.15 } as const;
/** Of the tasks, the share run under the soft policy (the backbone loads each stage); the rest run hard. */
const SOFT = 2 / 3;

/** `count` questions of the library's files drawn in MIX's shares, shuffled. */
export function drawQuestions(rng: SeededRandom, count: number): Question[] {
  const records = readQuestions("records.jsonl");
  const prose = readQuestions("prose.jsonl");
  const pools: Record<keyof typeof MIX, Question[]> = {
    recordOneHop: records.filter((q) => q.form !== "two_hop"),
    recordTwoHops: records.filter((q) => q.form === "two_hop"),
    proseOneHop: prose.filter((q) => q.form !== "two_hop"),
    proseTwoHops: prose.filter((q) => q.form === "two_hop"),
  };
  const kinds = Object.keys(MIX) as (keyof typeof MIX)[];
  const drawn = kinds.flatMap((kind, i) => {
    // the last kind takes what rounding left, so that the draw is `count` questions
    const taken = kinds.slice(0, i).reduce((n, k) => n + Math.round(count * MIX[k]), 0);
    const n = i === kinds.length - 1 ? count - taken : Math.round(count * MIX[kind]);
    return rng.shuffled(pools[kind]).slice(0, n);
  });
  return rng.shuffled(drawn);
}

/** The drawn questions as the oracle's tasks: SOFT of them under the soft policy, each with its documents' target. */
async function libraryTasks(run: TrainingRun, rng: SeededRandom): Promise<Task[]> {
  const index = LocalIndex.open(DEFAULT_CORPUS, join(run.work, "query-index.json"), run.logger);
  try {
    const tasks: Task[] = [];
    for (const q of drawQuestions(rng, run.tasks)) {
      const task = await questionTask(index, q);
      if (!task) continue;
      tasks.push({
        // the template path's fact is unused when a target is given
        fact: { kind: "", entity: "", doc: "", relation: "", value: "" },
        question: task.question,
        target: task.target,
        policy: rng.next() < SOFT ? "soft" : "hard",
        workflow: ORACLE_WORKFLOW,
      });
    }
    return tasks;
  } finally {
    index.close();
  }
}

/**
 * Records the oracle's trajectories (when `record`) over `run.tasks` drawn questions, and writes each stage's samples
 * for the Qwen backbone at `model` (WTS1, every 20th held out) in the work folder.
 */
export async function writeLibraryData(run: TrainingRun, model: string, { record }: { record: boolean }) {
  const traceDir = join(run.work, "traces");
  if (record) {
    const tasks = await libraryTasks(run, new SeededRandom(run.seed));
    const facts = readFacts(TRAINING_ENTITIES);
    await recordTrajectories(run, tasks, facts, new SeededRandom(run.seed + 1), traceDir, { counterfactual: false });
  }
  await writeQwenStageSamples(run, model, traceDir, qwenTestAdapters(model).manifest, ORACLE_WORKFLOW);
}

/**
 * The sample with every call the model writes opened by its JSON alone: `opener` (the template's `<tool_call>` and the
 * newline after it) taken out wherever all of it is a target. The backbone's output rows for `<tool_call>`,
 * `</tool_call>` and `<|im_start|>` are all but one (cosine 0.93 and 0.999998 in Qwen2.5-Coder-0.5B): trained on the
 * tag, its loss there stayed near 10 nats (weighted ten times over too) and the model wrote `<|im_start|>`, and after
 * text nothing more. The JSON alone is what it can write, and what the server takes as a call (JinjaChatWrapper).
 * `closer` (`</tool_call>`) stays in the tokens but is no longer a target: its row is as unreachable, and the served
 * stages' calls stood with `<|im_start|>` written there. The context keeps the template's syntax, as the server
 * renders the history.
 */
export function bareCallOpeners(
  sample: TokenSample,
  opener: readonly TokenId[],
  closer: readonly TokenId[],
): TokenSample {
  const targetRun = (seq: readonly TokenId[], i: number) =>
    seq.length > 0 && seq.every((t, k) => sample.tokens[i + k] === t && sample.mask[i + k] === 1);
  const tokens: TokenId[] = [];
  const mask: number[] = [];
  for (let i = 0; i < sample.tokens.length; i++) {
    if (targetRun(opener, i)) {
      i += opener.length - 1;
      continue;
    }
    if (targetRun(closer, i)) {
      tokens.push(...closer);
      mask.push(...closer.map(() => 0));
      i += closer.length - 1;
      continue;
    }
    tokens.push(sample.tokens[i]!);
    mask.push(sample.mask[i]!);
  }
  return { tokens, mask: Uint8Array.from(mask) };
}

/**
 * Each capability's stage samples of the traces in `traceDir`, rendered as the server renders them for the backbone at
 * `model` (model.chatTemplate "jinja", the functions of `manifest`: a library of its shapes with the recorded aliases
 * and texts), each checked token for token against the model's own Jinja template, its calls then opened by their
 * JSON alone (bareCallOpeners); written as train_lora.py reads them.
 */
export async function writeQwenStageSamples(
  run: TrainingRun,
  model: string,
  traceDir: string,
  manifest: string,
  capabilities: readonly string[],
): Promise<void> {
  const codec = await LlamaChatCodec.load({ modelPath: model, logger: run.logger, chatTemplate: "jinja" });
  try {
    const { samples } = await renderTraces(
      run,
      traceDir,
      {
        path: model,
        endOfTurn: qwenEndOfTurn(model, codec),
        manifest,
        chatTemplate: "jinja",
        check: templateCheck(model, codec),
      },
      capabilities,
    );
    const opener = codec.tokenize("<tool_call>\n", true);
    const closer = codec.tokenize("</tool_call>", true);
    const bare = Object.fromEntries(
      Object.entries(samples).map(([capability, list]) => [
        capability,
        list.map((s) => bareCallOpeners(s, opener, closer)),
      ]),
    );
    writeStageSamples(run, bare, capabilities);
  } finally {
    await codec.dispose();
  }
}
