import { describe, expect, it } from "vitest";
import type { TrajectoryDriver } from "../../src/harness/driver.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import type { SessionService } from "../../src/sessions/SessionService.js";
import { sentence, type Fact } from "../../training/pipeline/facts.js";
import { OracleDriver, type OracleQuestion, type OracleStyle } from "../../training/pipeline/OracleDriver.js";

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
