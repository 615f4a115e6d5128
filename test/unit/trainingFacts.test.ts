import { describe, expect, it } from "vitest";
import { SeededRandom } from "../../src/demo/random.js";
import { counterfactual, readFacts, redrawn, type Fact } from "../../training/pipeline/facts.js";
import { TRAINING_ENTITIES } from "../../training/pipeline/paths.js";

const facts = readFacts(TRAINING_ENTITIES);
const relationValues = new Map<string, Set<string>>();
for (const f of facts)
  relationValues.set(
    `${f.kind}/${f.relation}`,
    (relationValues.get(`${f.kind}/${f.relation}`) ?? new Set()).add(f.value),
  );

/** Every edited fact keeps its entity and relation, and takes another value its relation has. */
function expectEditedWithinRelation(edited: readonly Fact[]): void {
  expect(edited).toHaveLength(facts.length);
  edited.forEach((e, i) => {
    const f = facts[i]!;
    expect([e.kind, e.entity, e.doc, e.relation]).toEqual([f.kind, f.entity, f.doc, f.relation]);
    const values = relationValues.get(`${f.kind}/${f.relation}`)!;
    expect(values.has(e.value)).toBe(true);
    if (values.size > 1) expect(e.value).not.toBe(f.value);
  });
}

describe("edited corpora of the training facts", () => {
  it("counterfactual gives every fact another value of its relation", () => {
    expectEditedWithinRelation(counterfactual(facts));
  });

  it("redrawn gives every fact another value of its relation, drawn anew per generator and reproducible from its seed", () => {
    const first = redrawn(facts, new SeededRandom(7));
    expectEditedWithinRelation(first);
    expect(redrawn(facts, new SeededRandom(7))).toEqual(first);
    const second = redrawn(facts, new SeededRandom(8));
    // a fresh draw: most facts of relations with many values change between draws
    const changed = second.filter((f, i) => f.value !== first[i]!.value).length;
    expect(changed / facts.length).toBeGreaterThan(0.5);
  });
});
