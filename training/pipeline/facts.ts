import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { SeededRandom } from "../../src/demo/random.js";

/**
 * The facts the demo library learns to look up: every (entity, relation, value) of the entity files in
 * training/corpus/entities. Each is stated in one sentence of the same shape, "The <relation> of <entity> is
 * <value>.", so a question that names the relation and the entity finds its evidence by what it says.
 */
export interface Fact {
  kind: string;
  entity: string;
  /** The entity's document id in the corpus (`entities/<kind>.jsonl#<slug>`). */
  doc: string;
  relation: string;
  value: string;
}

/** How each kind's attributes read in a sentence; attributes without a phrase are not stated. */
const RELATIONS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  countries: {
    capital: "capital",
    continent: "continent",
    currency: "currency",
    language: "language",
    highest_point: "highest point",
  },
  cities: { country: "country", river: "river", landmark: "landmark" },
  elements: { symbol: "symbol", atomic_number: "atomic number", category: "category", discovered_by: "discoverer" },
  inventions: { inventor: "inventor", year: "year of invention", country: "country of origin" },
  mountains: {
    height_m: "height in metres",
    range: "mountain range",
    country: "country",
    first_ascent_year: "first ascent year",
  },
  people: {
    birth_year: "birth year",
    birthplace: "birthplace",
    nationality: "nationality",
    field: "field",
    known_for: "claim to fame",
  },
  planets: {
    type: "type",
    order_from_sun: "position from the Sun",
    largest_moon: "largest moon",
    orbits: "parent body",
  },
  rivers: {
    length_km: "length in kilometres",
    mouth: "mouth",
    continent: "continent",
    city: "main city",
    source: "source",
  },
  works: { creator: "creator", year: "year", kind: "kind" },
};

const slug = (s: string) =>
  s
    .toLowerCase()
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");

export const sentence = (f: Pick<Fact, "relation" | "entity" | "value">) =>
  `The ${f.relation} of ${f.entity} is ${f.value}.`;

/** Every fact of the entity files in `dir`, in file then entity then attribute order. */
export function readFacts(dir: string): Fact[] {
  const facts: Fact[] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()) {
    const kind = file.replace(/\.json$/, "");
    const phrases = RELATIONS[kind];
    if (!phrases)
      throw new Error(
        `${join(dir, file)}: no relation phrases for entity kind "${kind}" (add them to RELATIONS in training/pipeline/facts.ts)`,
      );
    const rows = JSON.parse(readFileSync(join(dir, file), "utf8")) as Record<string, unknown>[];
    for (const row of rows) {
      const entity = String(row.name ?? row.title);
      for (const [attribute, relation] of Object.entries(phrases)) {
        const value = row[attribute];
        if (typeof value === "string" && value)
          facts.push({ kind, entity, doc: `entities/${kind}.jsonl#${slug(entity)}`, relation, value });
      }
    }
  }
  return facts;
}

/** Whether an entity is held out of training entirely (about a quarter, fixed by its name's hash). */
export function neverTrained(entity: string): boolean {
  return createHash("sha256").update(entity).digest()[0]! < 64;
}

/** The corpus files of these facts: one JSONL per kind, one document per entity stating each of its facts. */
export function corpusFiles(facts: readonly Fact[]): Record<string, string> {
  const byDoc = new Map<string, Fact[]>();
  for (const f of facts) byDoc.set(f.doc, [...(byDoc.get(f.doc) ?? []), f]);
  const files: Record<string, string> = {};
  for (const [doc, of] of byDoc) {
    const [file, id] = doc.split("#") as [string, string];
    const line = JSON.stringify({ id, title: of[0]!.entity, text: of.map(sentence).join(" ") });
    files[file] = `${files[file] ?? ""}${line}\n`;
  }
  return files;
}

/** Question phrasings: training uses the first set; the held-out evaluation only the second. */
const TRAIN_PHRASINGS = [
  (r: string, e: string) => `What is the ${r} of ${e}?`,
  (r: string, e: string) => `Tell me the ${r} of ${e}.`,
  (r: string, e: string) => `Find out the ${r} of ${e}.`,
];
const HELD_OUT_PHRASINGS = [
  (r: string, e: string) => `Do you know the ${r} of ${e}?`,
  (r: string, e: string) => `I would like to learn the ${r} of ${e}.`,
];

export const trainingQuestion = (f: Fact, variant: number) =>
  TRAIN_PHRASINGS[variant % TRAIN_PHRASINGS.length]!(f.relation, f.entity);
export const heldOutQuestion = (f: Fact, variant: number) =>
  HELD_OUT_PHRASINGS[variant % HELD_OUT_PHRASINGS.length]!(f.relation, f.entity);
/** Whether `question` asks about `f` in one of the held-out phrasings. */
export const isHeldOutQuestion = (f: Fact, question: string) =>
  HELD_OUT_PHRASINGS.some((p) => p(f.relation, f.entity) === question);
/** The eval task group of the held-out questions about entities training never saw. */
export const NEVER_TRAINED_GROUP = "never-trained";

/** The indices of `facts` by relation (within an entity kind): the values a fact's value may be edited to. */
function byRelation(facts: readonly Fact[]): Map<string, number[]> {
  const groups = new Map<string, number[]>();
  facts.forEach((f, i) => groups.set(`${f.kind}/${f.relation}`, [...(groups.get(`${f.kind}/${f.relation}`) ?? []), i]));
  return groups;
}

/**
 * The counterfactual corpus's facts: each value swapped for another entity's value of the same relation (a
 * derangement within the relation), so an answer recalled from training is wrong and only one read is right.
 */
export function counterfactual(facts: readonly Fact[]): Fact[] {
  const edited = facts.map((f) => ({ ...f }));
  for (const indices of byRelation(facts).values()) {
    const values = indices.map((i) => facts[i]!.value);
    indices.forEach((i, k) => {
      // the next different value in the relation's own order: never the fact's own value
      const other = values
        .slice(k + 1)
        .concat(values.slice(0, k))
        .find((v) => v !== facts[i]!.value);
      if (other !== undefined) edited[i]!.value = other;
    });
  }
  return edited;
}

/**
 * The facts with every value redrawn at random from the other values of its relation. The oracle plays part of
 * its trajectories over corpora edited so: a stage that writes the value it remembers (or the relation's most
 * common one) rather than the one its evidence states is then wrong in training as in the counterfactual eval,
 * so reading is the only strategy that pays.
 */
export function redrawn(facts: readonly Fact[], rng: SeededRandom): Fact[] {
  const edited = facts.map((f) => ({ ...f }));
  for (const indices of byRelation(facts).values()) {
    const values = [...new Set(indices.map((i) => facts[i]!.value))];
    for (const i of indices) {
      const others = values.filter((v) => v !== facts[i]!.value);
      if (others.length) edited[i]!.value = rng.pick(others);
    }
  }
  return edited;
}
