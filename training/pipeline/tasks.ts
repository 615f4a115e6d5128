import { readFileSync, writeFileSync } from "node:fs";
import type { SeededRandom } from "../../src/demo/random.js";
import {
  counterfactual,
  heldOutQuestion,
  neverTrained,
  NEVER_TRAINED_GROUP,
  trainingQuestion,
  type Fact,
} from "./facts.js";
import {
  differenceValue,
  drawDifferences,
  heldOutDifferenceQuestion,
  neverTrainedPair,
  trainedPair,
  trainingDifferenceQuestion,
  type Difference,
} from "./computation.js";
import { COMPUTATION_WORKFLOW, ORACLE_WORKFLOW, type OracleTarget, type UpstreamSlip } from "./OracleDriver.js";
import type { TrainingRun } from "./run.js";

/**
 * A question the oracle answers in training, and the policy that drives its run: about one fact, or the difference of
 * two (`difference`; `fact` is its first operand), which a hard run with the code stage answers.
 */
export interface Task {
  fact: Fact;
  difference?: Difference;
  /** The oracle's deliberate slip upstream of the code stage, on a computation question. */
  slip?: UpstreamSlip;
  question: string;
  policy: "soft" | "hard";
  workflow?: readonly string[];
  /** A question in any wording given with its documents (the Qwen library's): the oracle plays it from this. */
  target?: OracleTarget;
}

/** Held-out questions: trained entities asked in phrasings training never used, and entities training never saw. */
export function writeEvalTasks(run: TrainingRun, facts: readonly Fact[], rng: SeededRandom): void {
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
    JSON.stringify({
      id: `${prefix}-${i + 1}`,
      task: heldOutQuestion(f, i),
      answer,
      stages: [...ORACLE_WORKFLOW],
      ...(prefix === "unseen" ? { group: NEVER_TRAINED_GROUP } : {}),
    });
  const rows = [
    ...seen.map((f, i) => line(f, i, "seen", f.value)),
    ...unseen.map((f, i) => line(f, i, "unseen", f.value)),
  ];
  writeFileSync(run.library.evalTasks, `${rows.join("\n")}\n`);
  const cf = [
    ...seen.map((f, i) => line(f, i, "seen", edited.get(f)!)),
    ...unseen.map((f, i) => line(f, i, "unseen", edited.get(f)!)),
  ];
  writeFileSync(run.library.counterfactualTasks, `${cf.join("\n")}\n`);
}

/** `count` training questions over the trained entities, a third of them under the hard policy. */
export function trainingTasks(facts: readonly Fact[], rng: SeededRandom, count: number): Task[] {
  const trained = rng.shuffled(facts.filter((f) => !neverTrained(f.entity)));
  return Array.from({ length: count }, (_, i) => {
    const fact = trained[i % trained.length]!;
    return {
      fact,
      question: trainingQuestion(fact, Math.floor(rng.next() * 3)),
      policy: i % 3 === 2 ? "hard" : "soft",
    };
  });
}

/**
 * `count` computation questions over trained entities, every one a hard run through the code stage; with `slips` (the
 * code stage is trained on them), a quarter with plan's slip and a quarter with search's (UpstreamSlip), in turn.
 */
export function computationTasks(
  facts: readonly Fact[],
  rng: SeededRandom,
  count: number,
  opts: { slips: boolean },
): Task[] {
  // a slip on one phrasing and one on the other (the phrasings alternate)
  const slips = ["swapped", undefined, undefined, "unsearched"] as const;
  return drawDifferences(facts, rng, count, trainedPair).map((difference, i) => {
    const slip = opts.slips ? slips[i % slips.length] : undefined;
    return {
      fact: difference.first,
      difference,
      ...(slip ? { slip } : {}),
      question: trainingDifferenceQuestion(difference, i),
      policy: "hard" as const,
      workflow: COMPUTATION_WORKFLOW,
    };
  });
}

/**
 * The computation tasks' held-out files, beside the library's other task files: differences about trained entities in
 * phrasings training never used, and differences of two entities training never saw (a group of their own); the
 * counterfactual file asks the same over the edited corpus, where only values read and subtracted are right.
 */
export function writeComputationEvalTasks(run: TrainingRun, facts: readonly Fact[], rng: SeededRandom): void {
  const edited = new Map(counterfactual(facts).map((f, i) => [facts[i]!, f.value]));
  const tasks = [
    ...drawDifferences(facts, rng, 12, trainedPair).map((d) => ({ d, prefix: "seen" })),
    ...drawDifferences(facts, rng, 8, neverTrainedPair).map((d) => ({ d, prefix: "unseen" })),
  ];
  const line = ({ d, prefix }: { d: Difference; prefix: string }, i: number, answer: string) =>
    JSON.stringify({
      id: `${prefix}-${i + 1}`,
      task: heldOutDifferenceQuestion(d, i),
      answer,
      stages: [...COMPUTATION_WORKFLOW],
      ...(prefix === "unseen" ? { group: NEVER_TRAINED_GROUP } : {}),
    });
  const rows = tasks.map((t, i) => line(t, i, differenceValue(t.d.first.value, t.d.second.value)));
  writeFileSync(run.library.computationTasks, `${rows.join("\n")}\n`);
  const cf = tasks.map((t, i) => line(t, i, differenceValue(edited.get(t.d.first)!, edited.get(t.d.second)!)));
  writeFileSync(run.library.computationCounterfactualTasks, `${cf.join("\n")}\n`);
}

/**
 * The first `count` tasks of a task file written to `out`, its groups (ids "seen-N", "unseen-N": the id without its
 * number) taken in equal shares: a smaller eval that still shows every group. The check scripts' sampled runs.
 */
export function writeTaskSubset(file: string, count: number, out: string): string {
  const rows = readFileSync(file, "utf8").split("\n").filter(Boolean);
  const group = (row: string) => (JSON.parse(row) as { id: string }).id.replace(/-\d+$/, "");
  const groups = [...new Set(rows.map(group))];
  const per = Math.ceil(count / groups.length);
  writeFileSync(out, `${groups.flatMap((g) => rows.filter((r) => group(r) === g).slice(0, per)).join("\n")}\n`);
  return out;
}
