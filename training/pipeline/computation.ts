import type { SeededRandom } from "../../src/demo/random.js";
import { neverTrained, type Fact } from "./facts.js";

/**
 * The computation tasks of the `code` capability: the difference between two looked-up values of one relation
 * ("What is the difference between the first ascent year of K2 and the first ascent year of Everest?"). Only the
 * relations whose every value is a whole number take part.
 */
export const NUMERIC_RELATIONS = [
  "atomic number",
  "year of invention",
  "first ascent year",
  "height in metres",
  "birth year",
  "length in kilometres",
  "year",
] as const;

/** Two facts of one relation about two entities, and what the task computes from them. */
export interface Difference {
  first: Fact;
  second: Fact;
}

/** The sentence opening that states a difference's result, as the code stage hands it off ("... is 1."). */
export const differenceSubject = (d: Difference) =>
  `The difference between the ${d.first.relation} of ${d.first.entity} and the ${d.second.relation} of ${d.second.entity}`;

/** The answer of a difference over these values (the corpus's, or an edited corpus's). */
export const differenceValue = (a: string, b: string) => String(Math.abs(Number(a) - Number(b)));

const TRAIN_PHRASINGS = [
  (a: Fact, b: Fact) =>
    `What is the difference between the ${a.relation} of ${a.entity} and the ${b.relation} of ${b.entity}?`,
  (a: Fact, b: Fact) =>
    `Compute the difference between the ${a.relation} of ${a.entity} and the ${b.relation} of ${b.entity}.`,
];
const HELD_OUT_PHRASINGS = [
  (a: Fact, b: Fact) => `How far apart are the ${a.relation} of ${a.entity} and the ${b.relation} of ${b.entity}?`,
  (a: Fact, b: Fact) => `By how much do the ${a.relation} of ${a.entity} and the ${b.relation} of ${b.entity} differ?`,
];

export const trainingDifferenceQuestion = (d: Difference, variant: number) =>
  TRAIN_PHRASINGS[variant % TRAIN_PHRASINGS.length]!(d.first, d.second);
export const heldOutDifferenceQuestion = (d: Difference, variant: number) =>
  HELD_OUT_PHRASINGS[variant % HELD_OUT_PHRASINGS.length]!(d.first, d.second);

/**
 * `count` differences over the facts `eligible` keeps, drawn at random: two different entities of one numeric
 * relation whose values differ (a difference of 0 is no test of reading both).
 */
export function drawDifferences(
  facts: readonly Fact[],
  rng: SeededRandom,
  count: number,
  eligible: (f: Fact) => boolean,
): Difference[] {
  const byRelation = new Map<string, Fact[]>();
  for (const f of facts)
    if ((NUMERIC_RELATIONS as readonly string[]).includes(f.relation) && /^\d+$/.test(f.value) && eligible(f))
      byRelation.set(`${f.kind}/${f.relation}`, [...(byRelation.get(`${f.kind}/${f.relation}`) ?? []), f]);
  const groups = [...byRelation.values()].filter((g) => new Set(g.map((f) => f.value)).size > 1);
  if (!groups.length) throw new Error("no numeric relation has two entities with different values to subtract");
  return Array.from({ length: count }, () => {
    const group = rng.pick(groups);
    const first = rng.pick(group);
    const second = rng.pick(group.filter((f) => f.value !== first.value));
    return { first, second };
  });
}

/** Differences about trained entities only (training's own), or only about never-trained ones (a held-out group). */
export const trainedPair = (f: Fact) => !neverTrained(f.entity);
export const neverTrainedPair = (f: Fact) => neverTrained(f.entity);
