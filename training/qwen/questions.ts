/**
 * The training questions of the Qwen capability library over the default corpus's entity records: every fact a record
 * states, asked in one of several wordings of its form, and two-hop questions that chain two records (the answer of
 * the first is the entity of the second). The prose questions (`prose.jsonl`) are written by hand beside them; the
 * held-out set (`held-out.jsonl`, fixed before training) is never drawn from: its facts are left out here.
 *
 * `node dist/training/qwen/questions.js` writes training/qwen/questions/records.jsonl and the held-out set as an
 * eval task file, eval-held-out.jsonl (both deterministic).
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SeededRandom } from "../../src/demo/random.js";
import { PACKAGE_ROOT } from "../../src/paths.js";

export const QUESTIONS_DIR = join(PACKAGE_ROOT, "training", "qwen", "questions");
const ENTITIES = join(PACKAGE_ROOT, "corpus", "entities");
const SEED = 69;

/** The held-out set's SHA-256, fixed in c7cd61d before any training (the training record names it). */
export const HELD_OUT_SHA256 = "74fc2839017b6f867ce64b5f0506a0f9ad1cbd3a14d16194ede2ef4d9d44962b";

export const FORMS = ["what", "who", "where", "when", "how_many", "two_hop"] as const;
export type Form = (typeof FORMS)[number];

/** One question with its answer, as every question file of the library holds it. */
export interface Question {
  id: string;
  form: Form;
  question: string;
  answer: string;
  accept: string[];
  /** Where the answer is read: a prose file's corpus path, or `path#id` of a record; two, in order, for two hops. */
  documents: string[];
  /** Two hops: the first document's answer, which the second search needs. */
  bridge?: string;
  withheld?: boolean;
}

interface EntityRecord {
  file: string;
  id: string;
  title: string;
  facts: Map<string, string>;
}

/** The wordings of each relation's question ({e}: the entity), and its form. */
const RELATIONS: Record<string, { form: Form; wordings: string[] }> = {
  country: {
    form: "where",
    wordings: [
      "In which country is {e}?",
      "Which country is {e} in?",
      "{e} is in what country?",
      "Name the country of {e}.",
    ],
  },
  river: {
    form: "what",
    wordings: ["Which river flows through {e}?", "What river runs through {e}?", "Name the river of {e}."],
  },
  landmark: {
    form: "what",
    wordings: ["What is a famous landmark of {e}?", "Name a landmark in {e}.", "Which landmark is {e} known for?"],
  },
  capital: {
    form: "what",
    wordings: ["What is the capital city of {e}?", "Which city is the capital of {e}?", "Name the capital of {e}."],
  },
  continent: {
    form: "where",
    wordings: ["On which continent is {e}?", "Which continent is {e} on?", "{e} lies on what continent?"],
  },
  currency: {
    form: "what",
    wordings: ["What currency is used in {e}?", "Which currency does {e} use?", "Name the currency of {e}."],
  },
  language: {
    form: "what",
    wordings: [
      "What language is spoken in {e}?",
      "Which language do people speak in {e}?",
      "Name the language of {e}.",
    ],
  },
  "highest point": {
    form: "what",
    wordings: [
      "What is the highest point of {e}?",
      "Which peak is the highest in {e}?",
      "Name the highest point in {e}.",
    ],
  },
  "atomic number": {
    form: "how_many",
    wordings: [
      "What is the atomic number of {e}?",
      "How many protons does an atom of {e} have?",
      "Give the atomic number of {e}.",
    ],
  },
  category: {
    form: "what",
    wordings: ["What kind of element is {e}?", "Which category of element does {e} belong to?"],
  },
  discoverer: {
    form: "who",
    wordings: ["Who discovered {e}?", "Who was the discoverer of {e}?", "Name the person who discovered {e}."],
  },
  symbol: {
    form: "what",
    wordings: ["What is the chemical symbol for {e}?", "Which symbol stands for {e}?", "Give the symbol of {e}."],
  },
  "country of origin": {
    form: "where",
    wordings: ["In which country was the {e} invented?", "Which country does the {e} come from?"],
  },
  inventor: {
    form: "who",
    wordings: ["Who invented the {e}?", "Who was the inventor of the {e}?", "Name the inventor of the {e}."],
  },
  "year of invention": {
    form: "when",
    wordings: ["When was the {e} invented?", "In what year was the {e} invented?", "What year did the {e} appear?"],
  },
  "first ascent year": {
    form: "when",
    wordings: [
      "When was {e} first climbed?",
      "In which year was {e} first ascended?",
      "What year saw the first ascent of {e}?",
    ],
  },
  "height in metres": {
    form: "how_many",
    wordings: ["How high is {e} in metres?", "How many metres tall is {e}?", "What is the height of {e} in metres?"],
  },
  "mountain range": {
    form: "where",
    wordings: ["In which mountain range is {e}?", "Which range is {e} part of?", "Name the mountain range of {e}."],
  },
  "birth year": {
    form: "when",
    wordings: ["When was {e} born?", "In what year was {e} born?", "What year was {e} born in?"],
  },
  birthplace: {
    form: "where",
    wordings: ["Where was {e} born?", "In which city was {e} born?", "What is the birthplace of {e}?"],
  },
  "claim to fame": {
    form: "what",
    wordings: ["What is {e} famous for?", "What is {e} best known for?", "Why is {e} famous?"],
  },
  field: { form: "what", wordings: ["What field did {e} work in?", "In which field is {e} known?"] },
  nationality: { form: "what", wordings: ["What nationality was {e}?", "What was the nationality of {e}?"] },
  "largest moon": {
    form: "what",
    wordings: [
      "What is the largest moon of {e}?",
      "Which is the biggest moon of {e}?",
      "Name the largest moon of {e}.",
    ],
  },
  "parent body": { form: "what", wordings: ["What body does {e} orbit?", "Which planet does {e} go around?"] },
  "position from the Sun": {
    form: "how_many",
    wordings: ["What is the position of {e} from the Sun?", "Counting from the Sun, which planet number is {e}?"],
  },
  type: { form: "what", wordings: ["What type of body is {e}?", "What kind of planet is {e}?"] },
  "length in kilometres": {
    form: "how_many",
    wordings: [
      "How long is the {e} in kilometres?",
      "How many kilometres long is the {e}?",
      "What is the length of the {e} in kilometres?",
    ],
  },
  "main city": {
    form: "what",
    wordings: [
      "What is the main city on the {e}?",
      "Which major city lies on the {e}?",
      "Name the main city of the {e}.",
    ],
  },
  mouth: {
    form: "where",
    wordings: [
      "Where does the {e} flow into?",
      "Into which body of water does the {e} empty?",
      "Where is the mouth of the {e}?",
    ],
  },
  source: {
    form: "where",
    wordings: ["Where does the {e} rise?", "Where is the source of the {e}?", "In which place does the {e} begin?"],
  },
  creator: { form: "who", wordings: ["Who created {e}?", "Who made {e}?", "Name the creator of {e}."] },
  kind: { form: "what", wordings: ["What kind of work is {e}?", "Is {e} a painting, a book or something else?"] },
  year: { form: "when", wordings: ["When was {e} made?", "In what year was {e} created?", "What year is {e} from?"] },
};

/** Two records chained: the first's relation names the second's entity; the question asks the second's relation. */
const CHAINS: { from: [string, string]; to: [string, string]; wordings: string[] }[] = [
  {
    from: ["cities", "country"],
    to: ["countries", "capital"],
    wordings: [
      "What is the capital of the country where {e} is?",
      "{e} is in a country; which city is that country's capital?",
    ],
  },
  {
    from: ["cities", "country"],
    to: ["countries", "currency"],
    wordings: [
      "What currency is used in the country where {e} lies?",
      "Which money would you use in the country of {e}?",
    ],
  },
  {
    from: ["mountains", "country"],
    to: ["countries", "capital"],
    wordings: [
      "What is the capital of the country where {e} stands?",
      "Which city is the capital of the country that has {e}?",
    ],
  },
  {
    from: ["works", "creator"],
    to: ["people", "birth year"],
    wordings: ["In what year was the creator of {e} born?", "When was the person who made {e} born?"],
  },
  {
    from: ["works", "creator"],
    to: ["people", "birthplace"],
    wordings: ["Where was the creator of {e} born?", "In which city was the maker of {e} born?"],
  },
  {
    from: ["inventions", "country of origin"],
    to: ["countries", "capital"],
    wordings: [
      "What is the capital of the country where the {e} was invented?",
      "The {e} came from a country; what is its capital?",
    ],
  },
  {
    from: ["rivers", "main city"],
    to: ["cities", "country"],
    wordings: ["In which country is the main city on the {e}?", "The {e}'s main city is in which country?"],
  },
  {
    from: ["countries", "capital"],
    to: ["cities", "river"],
    wordings: ["Which river flows through the capital of {e}?", "What river runs through {e}'s capital city?"],
  },
  {
    from: ["countries", "capital"],
    to: ["cities", "landmark"],
    wordings: ["What landmark is found in the capital of {e}?", "Name a landmark of the capital of {e}."],
  },
  {
    from: ["cities", "river"],
    to: ["rivers", "length in kilometres"],
    wordings: [
      "How long, in kilometres, is the river that flows through {e}?",
      "How many kilometres long is the river of {e}?",
    ],
  },
];

/** The default corpus's entity records, by file stem, each with the facts its sentences state. */
export function readEntityRecords(): Map<string, EntityRecord[]> {
  const byFile = new Map<string, EntityRecord[]>();
  for (const name of readdirSync(ENTITIES)
    .filter((n) => n.endsWith(".jsonl"))
    .sort()) {
    const records = readFileSync(join(ENTITIES, name), "utf8")
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => {
        const r = JSON.parse(l) as { id: string; title: string; text: string };
        const facts = new Map<string, string>();
        const prefix = "The ";
        for (const sentence of r.text.split(/(?<=\.) (?=The )/)) {
          const of = sentence.lastIndexOf(` of ${r.title} is `);
          if (!sentence.startsWith(prefix) || of < 0) continue;
          facts.set(
            sentence.slice(prefix.length, of),
            sentence.slice(of + ` of ${r.title} is `.length).replace(/\.$/, ""),
          );
        }
        return { file: `corpus/entities/${name}`, id: r.id, title: r.title, facts };
      });
    byFile.set(name.replace(/\.jsonl$/, ""), records);
  }
  return byFile;
}

const ref = (r: EntityRecord) => `${r.file}#${r.id}`;
const ask = (wording: string, entity: string) => {
  const q = wording.replaceAll("{e}", entity);
  return q[0]!.toUpperCase() + q.slice(1);
};

/** Every record fact and chain as a training question, leaving out the facts the held-out set asks. */
export function recordQuestions(heldOut: readonly Question[]): Question[] {
  const rng = new SeededRandom(SEED);
  const asked = new Set(heldOut.map((q) => `${q.documents.at(-1)}|${q.answer}`));
  const records = readEntityRecords();
  const out: Question[] = [];
  for (const [stem, list] of records)
    for (const r of list)
      for (const [relation, value] of r.facts) {
        const kind = RELATIONS[relation];
        if (!kind || asked.has(`${ref(r)}|${value}`)) continue;
        out.push({
          id: `r-${stem}-${r.id}-${relation.replaceAll(" ", "-")}`,
          form: kind.form,
          question: ask(rng.pick(kind.wordings), r.title),
          answer: value,
          accept: [],
          documents: [ref(r)],
        });
      }
  for (const chain of CHAINS) {
    const targets = new Map((records.get(chain.to[0]) ?? []).map((r) => [r.title, r]));
    for (const first of records.get(chain.from[0]) ?? []) {
      const bridge = first.facts.get(chain.from[1]);
      const second = bridge === undefined ? undefined : targets.get(bridge);
      const answer = second?.facts.get(chain.to[1]);
      if (!second || answer === undefined || asked.has(`${ref(second)}|${answer}`)) continue;
      out.push({
        id: `r-${chain.from[0]}-${first.id}-then-${chain.to[1].replaceAll(" ", "-")}`,
        form: "two_hop",
        question: ask(rng.pick(chain.wordings), first.title),
        answer,
        accept: [],
        documents: [ref(first), ref(second)],
        bridge,
      });
    }
  }
  return out;
}

/** The library's hard workflow: every question is planned, searched (once or twice) and written. */
const WORKFLOW = ["plan", "search", "write"];

/**
 * The held-out questions as `weact-mcp eval` reads them: the answer or any accepted spelling counts, and those on a
 * withheld document form a group of their own (the table reports it apart); each id keeps its form.
 */
export const evalTasks = (heldOut: readonly Question[]) =>
  heldOut.map((q) => ({
    id: q.id,
    task: q.question,
    answer: [q.answer, ...q.accept],
    ...(q.withheld ? { group: "withheld-documents" } : {}),
    stages: WORKFLOW,
  }));

export const readQuestions = (name: string): Question[] =>
  readFileSync(join(QUESTIONS_DIR, name), "utf8")
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Question);

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const heldOut = readQuestions("held-out.jsonl");
  const write = (name: string, rows: readonly object[]) => {
    writeFileSync(join(QUESTIONS_DIR, name), rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
    process.stdout.write(`${rows.length} lines written to ${join(QUESTIONS_DIR, name)}\n`);
  };
  write("records.jsonl", recordQuestions(heldOut));
  write("eval-held-out.jsonl", evalTasks(heldOut));
}
