import { describe, expect, it } from "vitest";
import type { TrajectoryDriver } from "../../src/harness/driver.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import type { SessionService } from "../../src/sessions/SessionService.js";
import { sentence, type Fact } from "../../training/pipeline/facts.js";
import {
  OracleDriver,
  sentenceWith,
  spanAt,
  type OracleQuestion,
  type OracleStyle,
} from "../../training/pipeline/OracleDriver.js";

/**
 * The oracle's ideal turns (what the demo library's adapters are trained to write) for a difference question, on
 * histories built by hand: the code stage looks up whichever operand the history does not state, whatever slip
 * upstream made, and write++ answers first and quotes after.
 */
const fact = (entity: string, value: string): Fact => ({
  kind: "people",
  entity,
  doc: `entities/people.jsonl#${entity}`,
  relation: "birth year",
  value,
});
const HEISENBERG = fact("Werner Heisenberg", "1901");
const CURIE = fact("Marie Curie", "1867");
const DIFFERENCE = { first: HEISENBERG, second: CURIE };
const SUBJECT = "The difference between the birth year of Werner Heisenberg and the birth year of Marie Curie";

let ids = 0;
/** An assistant turn of `adapter` with one call, and its result. */
function exchange(adapter: string | null, name: string, args: Record<string, unknown>, result: string) {
  const id = `call_${++ids}`;
  const internal = name === "load_lora" || name === "offload_lora";
  return [
    { role: "assistant", content: "", adapter, author: "model", toolCalls: [{ id, name, arguments: args }] },
    { role: "tool", callId: id, name, content: result, isError: false, internal },
  ] as HistoryMessage[];
}
const load = (alias: string) => exchange(null, "load_lora", { adapter: alias }, `${alias} active.`);
const release = (alias: string, handoff: string) => exchange(alias, "offload_lora", { handoff }, "released.");
const searched = (alias: string, f: Fact) =>
  exchange(alias, "search", { query: `birth year of ${f.entity}` }, `1. [${f.doc}] ${f.entity}: ${sentence(f)}`);

/** The oracle's next turn under `active` after `history`. */
function next(
  active: string | null,
  history: HistoryMessage[],
  question: Partial<OracleQuestion> = {},
  style?: OracleStyle,
) {
  const inner = { active: () => active } as unknown as TrajectoryDriver;
  const oracle = new OracleDriver(
    inner,
    {} as SessionService,
    "owner",
    "s",
    { fact: HEISENBERG, difference: DIFFERENCE, ...question },
    style,
  );
  return oracle.idealTurn([{ role: "user", content: "What is the difference ...?" }, ...history]);
}
const callOf = (turn: ReturnType<typeof next>) => turn.calls[0]!;

describe("the oracle's code stage", () => {
  it("after an ideal search stage, looks up the second operand, runs the difference of both, and hands off its output", () => {
    const upstream = [...load("search"), ...searched("search", HEISENBERG), ...release("search", sentence(HEISENBERG))];
    const stage = [...upstream, ...load("code")];
    expect(callOf(next("code", stage))).toEqual({ name: "search", arguments: { query: "birth year of Marie Curie" } });
    const found = [...stage, ...searched("code", CURIE)];
    expect(callOf(next("code", found))).toEqual({
      name: "run_code",
      arguments: { language: "python", code: "print(abs(1901 - 1867))" },
    });
    const ran = [
      ...found,
      ...exchange("code", "run_code", { language: "python", code: "" }, "exit code 0\nstdout:\n34\n"),
    ];
    expect(callOf(next("code", ran))).toEqual({ name: "offload_lora", arguments: { handoff: `${SUBJECT} is 34.` } });
  });

  it("after search's slip (a release with no value), looks up both operands in turn", () => {
    const slipped = next("search", [...load("search")], { slip: "unsearched" });
    expect(callOf(slipped)).toEqual({
      name: "offload_lora",
      arguments: { handoff: "The birth year of Werner Heisenberg" },
    });
    const stage = [...load("search"), ...release("search", "The birth year of Werner Heisenberg"), ...load("code")];
    expect(callOf(next("code", stage))).toMatchObject({ arguments: { query: "birth year of Werner Heisenberg" } });
    const first = [...stage, ...searched("code", HEISENBERG)];
    expect(callOf(next("code", first))).toMatchObject({ arguments: { query: "birth year of Marie Curie" } });
    expect(callOf(next("code", [...first, ...searched("code", CURIE)]))).toMatchObject({
      arguments: { code: "print(abs(1901 - 1867))" },
    });
  });

  it("after plan's slip (the second operand planned and found), looks up the first", () => {
    const plan = next("plan", [...load("plan")], { slip: "swapped" });
    expect(callOf(plan)).toEqual({
      name: "offload_lora",
      arguments: { handoff: "Look up the birth year of Marie Curie." },
    });
    const search = next("search", [...load("plan"), ...release("plan", "x"), ...load("search")], { slip: "swapped" });
    expect(callOf(search)).toMatchObject({ name: "search", arguments: { query: "birth year of Marie Curie" } });
    const stage = [
      ...load("search"),
      ...searched("search", CURIE),
      ...release("search", sentence(CURIE)),
      ...load("code"),
    ];
    expect(callOf(next("code", stage))).toMatchObject({ arguments: { query: "birth year of Werner Heisenberg" } });
  });
});

describe("the oracle's writer", () => {
  const history = [...load("code"), ...release("code", `${SUBJECT} is 34.`), ...load("write")];

  it("answers from the code stage's handoff and hands the answer off", () => {
    expect(next("write", history)).toEqual({
      text: "Answer: 34",
      calls: [{ name: "offload_lora", arguments: { handoff: "34" } }],
    });
  });

  it("write++ answers first, then quotes the sentence it answered from", () => {
    expect(next("write", history, {}, { cite: true }).text).toBe(`Answer: 34\nEvidence: ${SUBJECT} is 34.`);
  });

  it("the base ends its turn once write released", () => {
    const done = [...load("plan"), ...release("plan", "p"), ...load("search"), ...release("search", "s"), ...history];
    expect(next(null, [...done, ...release("write", "34")])).toEqual({ text: "", calls: [] });
  });
});

describe("the oracle on a question given with its documents (any wording)", () => {
  const TARGET = {
    hops: [
      { query: "eiffel tower stands", document: "geography/landmarks.html" },
      { query: "paris river", document: "entities/cities.jsonl#paris" },
    ],
    bridge: "Paris",
    answer: "Seine",
  };
  const question = { fact: HEISENBERG, target: TARGET };
  const turn = (active: string | null, history: HistoryMessage[]) => next(active, history, question);
  const search = (query: string, result: string) => exchange("search", "search", { query }, result);

  it("plans two searches, runs each hop's query, reads a document whose result does not show the span, hands off both sentences", () => {
    expect(turn("plan", load("plan"))).toEqual({
      text: "Plan: search for eiffel tower stands, then what it names, then write the answer.",
      calls: [{ name: "offload_lora", arguments: { handoff: "Look up eiffel tower stands, then what it names." } }],
    });
    const stage = load("search");
    expect(callOf(turn("search", stage))).toEqual({ name: "search", arguments: { query: "eiffel tower stands" } });
    const first = [
      ...stage,
      ...search(
        "eiffel tower stands",
        "1. [geography/landmarks.html] Landmarks: The Eiffel Tower stands in Paris, France. It was built in 1889.",
      ),
    ];
    expect(callOf(turn("search", first))).toEqual({ name: "search", arguments: { query: "paris river" } });
    const second = [...first, ...search("paris river", "1. [entities/cities.jsonl#paris] Paris: The country of ...")];
    expect(callOf(turn("search", second))).toEqual({
      name: "read",
      arguments: { id_or_url: "entities/cities.jsonl#paris" },
    });
    const read = [
      ...second,
      ...exchange(
        "search",
        "read",
        { id_or_url: "entities/cities.jsonl#paris" },
        "The country of Paris is France. The river of Paris is Seine. The landmark of Paris is Eiffel Tower.",
      ),
    ];
    expect(callOf(turn("search", read))).toEqual({
      name: "offload_lora",
      arguments: { handoff: "The Eiffel Tower stands in Paris, France. The river of Paris is Seine." },
    });
    const written = [
      ...read,
      ...release("search", "The Eiffel Tower stands in Paris, France. The river of Paris is Seine."),
    ];
    expect(turn("write", [...written, ...load("write")])).toEqual({
      text: "Answer: Seine",
      calls: [{ name: "offload_lora", arguments: { handoff: "Seine" } }],
    });
  });

  it("hands off that it found nothing when a hop's document is not among the results, and write then answers unknown", () => {
    const stage = [...load("search"), ...search("eiffel tower stands", "1. [geography/nile.md] Nile: The Nile ...")];
    expect(callOf(turn("search", stage))).toEqual({
      name: "offload_lora",
      arguments: { handoff: "No evidence found." },
    });
    const written = [...stage, ...release("search", "No evidence found."), ...load("write")];
    expect(turn("write", written).text).toBe("Answer: unknown");
  });

  it("plans and searches its tries first, then the query; a try whose results show the span is searched enough", () => {
    const tried = { ...question, target: { ...TARGET, hops: [{ ...TARGET.hops[0]!, tries: ["eiffel"] }] } };
    expect(next("plan", load("plan"), tried).text).toBe("Plan: search for eiffel, then write the answer.");
    const turnTried = (history: HistoryMessage[]) => next("search", history, tried);
    const stage = load("search");
    expect(callOf(turnTried(stage))).toEqual({ name: "search", arguments: { query: "eiffel" } });
    const missed = [...stage, ...search("eiffel", 'No results for "eiffel".')];
    expect(callOf(turnTried(missed))).toEqual({ name: "search", arguments: { query: "eiffel tower stands" } });
    const answered = [
      ...stage,
      ...search("eiffel", "1. [geography/landmarks.html] Landmarks: The river of Paris is Seine."),
    ];
    expect(callOf(turnTried(answered))).toEqual({
      name: "offload_lora",
      arguments: { handoff: "The river of Paris is Seine." },
    });
  });

  it("takes a span's sentence whole: abbreviations and decimals inside it are no sentence end", () => {
    expect(sentenceWith("It is in Washington, D.C. today. Other text.", "Washington, D.C.")).toBe(
      "It is in Washington, D.C. today.",
    );
    expect(sentenceWith("1. [a] A: First one. Python 3.0 came in December 2008. Next.", "December 2008")).toBe(
      "Python 3.0 came in December 2008.",
    );
  });

  it("finds a span only as whole words, and leaves a snippet's opening ellipsis out", () => {
    const results = "1. [a] Portugal: …The continent of Portugal is Europe. Its currency is the Euro.";
    expect(sentenceWith(results, "Euro")).toBe("Its currency is the Euro.");
    expect(sentenceWith(results, "Portugal")).toBe("The continent of Portugal is Europe.");
    expect(spanAt("Europe", "Euro")).toBe(-1);
  });
});
