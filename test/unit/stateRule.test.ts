import { describe, expect, it } from "vitest";
import type { ToolCallRecord } from "../../src/sessions/history.js";
import { callableFunctions } from "../../src/sessions/modelFunctions.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../../src/library/weightActions.js";
import { callMismatch, nextWeights, stateRuleProblem, type StateRuleInput } from "../../src/sessions/stateRule.js";

const call = (name: string, args: Record<string, unknown> = {}, id = "call_1"): ToolCallRecord => ({
  id,
  name,
  arguments: args,
});
const rule = (over: Partial<StateRuleInput>) =>
  stateRuleProblem({
    action: LOAD_LORA,
    active: null,
    adapter: "plan",
    call: undefined,
    pending: [],
    resident: ["plan", "search"],
    ...over,
  });

describe("the state rule", () => {
  it("loads a resident adapter from the base", () => {
    expect(rule({})).toBeUndefined();
    expect(rule({ adapter: "search" })).toBeUndefined();
  });

  it("refuses a load while an adapter is active, without a name, or of an adapter that is not resident", () => {
    expect(rule({ active: "search" })).toBe(
      'load_lora refused: adapter "search" is active; offload it first (adapters load only from the base model)',
    );
    expect(rule({ adapter: undefined })).toBe("load_lora refused: name the adapter to load (adapter)");
    expect(rule({ adapter: "" })).toBe("load_lora refused: name the adapter to load (adapter)");
    expect(rule({ adapter: "write" })).toBe(
      'load_lora refused: unknown adapter "write"; the library has: plan, search',
    );
  });

  it("offloads only the active adapter, and nothing from the base", () => {
    expect(rule({ action: OFFLOAD_LORA, active: "plan", adapter: undefined })).toBeUndefined();
    expect(rule({ action: OFFLOAD_LORA, active: "plan", adapter: "plan" })).toBeUndefined();
    expect(rule({ action: OFFLOAD_LORA, active: null, adapter: undefined })).toBe(
      "offload_lora refused: no adapter is active (the base model is serving)",
    );
    expect(rule({ action: OFFLOAD_LORA, active: "plan", adapter: "search" })).toBe(
      'offload_lora refused: "search" is not the active adapter; "plan" is',
    );
    // an offload does not need the adapter to be resident (a refreshed or removed one is still released)
    expect(rule({ action: OFFLOAD_LORA, active: "gone", adapter: "gone", resident: [] })).toBeUndefined();
  });

  it("a prescribed action waits for the model's unanswered calls; an answering one does not", () => {
    const pending = [call("search", {}, "call_a"), call("read", {}, "call_b")];
    expect(rule({ pending })).toBe(
      "the model's last turn has unanswered calls (call_a, call_b); answer them before a prescribed load_lora",
    );
    expect(rule({ action: OFFLOAD_LORA, active: "plan", adapter: undefined, pending })).toMatch(
      /before a prescribed offload_lora$/,
    );
    expect(rule({ pending, call: call(LOAD_LORA, { adapter: "plan" }) })).toBeUndefined();
  });

  it("an answer must execute exactly the call it answers", () => {
    expect(callMismatch(LOAD_LORA, undefined, "plan")).toBeUndefined();
    expect(callMismatch(LOAD_LORA, call(LOAD_LORA, { adapter: "plan" }), "plan")).toBeUndefined();
    expect(callMismatch(LOAD_LORA, call(LOAD_LORA, { adapter: "plan" }), undefined)).toBeUndefined();
    expect(callMismatch(LOAD_LORA, call(LOAD_LORA, {}), "search")).toBeUndefined();
    expect(callMismatch(LOAD_LORA, call(LOAD_LORA, { adapter: "plan" }), "search")).toBe(
      'load_lora refused: the model\'s call asks for "plan", not "search"',
    );
    expect(callMismatch(OFFLOAD_LORA, call(LOAD_LORA, { adapter: "plan" }, "call_x"), undefined)).toBe(
      "offload_lora refused: call call_x is a load_lora call; it must be answered by load_lora",
    );
    // an offload's adapter argument is the state rule's business, not a mismatch
    expect(callMismatch(OFFLOAD_LORA, call(OFFLOAD_LORA, { adapter: "plan" }), "search")).toBeUndefined();
  });

  it("the model may call load_lora only from the base and offload_lora only under an adapter, plus its tools", () => {
    expect(callableFunctions(null, ["search", "read"])).toEqual([LOAD_LORA, "search", "read"]);
    expect(callableFunctions("plan", ["search"])).toEqual([OFFLOAD_LORA, "search"]);
    expect(callableFunctions("plan", [])).toEqual([OFFLOAD_LORA]);
  });

  it("anticipates the weights two actions ahead: the base after an adapter, then the other adapters; a harness plan overrides", () => {
    const resident = ["plan", "search", "write"];
    expect(nextWeights(null, resident)).toEqual(["plan", "search", "write"]);
    expect(nextWeights("search", resident)).toEqual([null, "plan", "write"]);
    expect(nextWeights("plan", resident, [null, "search"])).toEqual([null, "search"]);
    expect(nextWeights(null, resident, [null, "search"])).toEqual(["search"]);
  });

  it("guesses the adapters the trajectory has not used yet before those it has (a first visit costs the whole history)", () => {
    const resident = ["plan", "search", "write"];
    expect(nextWeights("search", resident, undefined, new Set(["plan", "search"]))).toEqual([null, "write", "plan"]);
    expect(nextWeights(null, resident, undefined, new Set(["plan"]))).toEqual(["search", "write", "plan"]);
    expect(nextWeights(null, resident, [null, "plan"], new Set(["plan"]))).toEqual(["plan"]);
  });
});
