import { writeFileSync } from "node:fs";
import type { SeededRandom } from "../../src/demo/random.js";
import {
  counterfactual,
  heldOutQuestion,
  neverTrained,
  NEVER_TRAINED_GROUP,
  trainingQuestion,
  type Fact,
} from "./facts.js";
import { ORACLE_WORKFLOW } from "./OracleDriver.js";
import type { TrainingRun } from "./run.js";

/** A question the oracle answers in training, and the policy that drives its run. */
export interface Task {
  fact: Fact;
  question: string;
  policy: "soft" | "hard";
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
