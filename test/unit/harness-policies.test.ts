import { describe, expect, it } from "vitest";
import { extractAnswer, judge } from "../../src/harness/answer.js";
import { DEFAULT_SOFT_LIMITS, DEFAULT_STAGE_BUDGET, layered, type StageBudget } from "../../src/budgets/budgets.js";
import type {
  GenerateRequest,
  ModelCall,
  ModelTurn,
  TrajectoryDriver,
  WeightOutcome,
} from "../../src/harness/driver.js";
import { runFixed } from "../../src/harness/policies/fixed.js";
import { runHard } from "../../src/harness/policies/hard.js";
import { runSoft } from "../../src/harness/policies/soft.js";
import { RunContext } from "../../src/harness/RunContext.js";
import { Trace } from "../../src/harness/trace/Trace.js";

/** A planned turn: text and calls in the same format the real model's turns come in. */
type Planned = {
  text?: string;
  calls?: { name: string; arguments?: Record<string, unknown> }[];
  tokens?: number;
  throws?: string;
};

/**
 * The engine double for policy logic: per route ("base" or an alias) a queue of planned turns, emitted through
 * the same driver interface and tool-call format as the real session. Everything done to it is logged.
 */
class ScriptedDriver implements TrajectoryDriver {
  readonly log: string[] = [];
  /** Milliseconds each operation takes, so time accounting sees work of a realistic shape. */
  workMs = 0;
  private current: string | null = null;
  private ids = 0;
  /** Weight actions that fail (nothing changes, as the server's failed switch leaves the session). */
  failing = { offloads: 0, loads: 0 };
  constructor(
    private readonly scripts: Record<string, Planned[]>,
    readonly adapters: readonly string[] = ["plan", "search", "write"],
    readonly tools: readonly string[] = ["search"],
  ) {}
  active() {
    return this.current;
  }
  async generate(_req: GenerateRequest): Promise<ModelTurn> {
    await work(this.workMs);
    const route = this.current ?? "base";
    const next = this.scripts[route]?.shift() ?? { text: `${route} idles` };
    if (next.throws) throw new Error(next.throws);
    const calls: ModelCall[] = (next.calls ?? []).map((c) => ({
      id: `c${++this.ids}`,
      name: c.name,
      arguments: c.arguments ?? {},
    }));
    this.log.push(`gen:${route}${calls.length ? `->${calls.map((c) => c.name).join(",")}` : ""}`);
    return {
      text: next.text ?? "",
      calls,
      adapter: this.current,
      generated: next.tokens ?? 10,
      prompt: 100,
      cached: 90,
      finishReason: calls.length ? "tool_calls" : "stop",
    };
  }
  async load(alias: string, o: { callId?: string; reason?: string }): Promise<WeightOutcome> {
    await work(this.workMs);
    this.log.push(`load:${alias}:${o.callId ? "model" : "harness"}`);
    if (this.failing.loads > 0 && this.failing.loads--)
      return { ok: false, error: "load failed", switchMs: 0, rebuildMs: 0, rebuiltTokens: 0, reusedTokens: 0 };
    this.current = alias;
    return { ok: true, callId: o.callId ?? "h", switchMs: 0.01, rebuildMs: 2, rebuiltTokens: 100 };
  }
  async offload(o: { callId?: string; handoff?: string; reason?: string }): Promise<WeightOutcome> {
    await work(this.workMs);
    this.log.push(`offload:${this.current}:${o.callId ? "model" : `harness(${o.reason})`}`);
    if (this.failing.offloads > 0 && this.failing.offloads--)
      return { ok: false, error: "offload failed", switchMs: 0, rebuildMs: 0, rebuiltTokens: 0, reusedTokens: 0 };
    this.current = null;
    return { ok: true, callId: o.callId ?? "h", switchMs: 0.01, rebuildMs: 2, rebuiltTokens: 100 };
  }
  async runTool(call: ModelCall) {
    await work(this.workMs);
    this.log.push(`tool:${call.name}`);
    return { ok: true };
  }
  async reject(callId: string, message: string) {
    this.log.push(`reject:${callId}:${message}`);
  }
  async note(text: string) {
    this.log.push(`note:${text}`);
  }
  /** A window that never fills (the context exit is proven on the real engine, in context-window.test.ts). */
  async room() {
    return { size: 1e9, used: 0, release: 0 };
  }
  async elide() {
    return { elided: 0, callIds: [], freedTokens: 0 };
  }
  /** The weights the policy said come next, each time it said so. */
  readonly plans: (readonly (string | null)[])[] = [];
  plan(upcoming: readonly (string | null)[]) {
    this.plans.push(upcoming);
  }
  background() {
    return { tokens: 0, batches: 0, ms: 0 };
  }
}

const work = (ms: number) => (ms ? new Promise((r) => setTimeout(r, ms)) : Promise.resolve());
const budget =
  (b: Partial<StageBudget> = {}) =>
  () =>
    layered(DEFAULT_STAGE_BUDGET, b);
const RESERVE = 256;
const context = (driver: TrajectoryDriver) => {
  const trace = new Trace("t_test", undefined);
  return {
    ctx: new RunContext(driver, trace, {
      maxTokensPerTurn: 64,
      contextReserve: RESERVE,
      steering: [],
      signal: new AbortController().signal,
    }),
    trace,
  };
};

/**
 * A context window that fills: every turn takes all the room it is given and each weight exchange adds `exchange`
 * tokens, so a stage runs until the window ends it.
 */
class FillingDriver extends ScriptedDriver {
  constructor(
    private readonly size: number,
    private used: number,
    private readonly exchange: number,
  ) {
    super({});
  }
  override async generate(req: GenerateRequest): Promise<ModelTurn> {
    const turn = await super.generate(req);
    this.used += req.maxTokens;
    return { ...turn, generated: req.maxTokens };
  }
  override async load(alias: string, o: { callId?: string; reason?: string }): Promise<WeightOutcome> {
    const done = await super.load(alias, o);
    if (done.ok) this.used += this.exchange;
    return done;
  }
  override async offload(o: { callId?: string; handoff?: string; reason?: string }): Promise<WeightOutcome> {
    const done = await super.offload(o);
    if (done.ok) this.used += this.exchange;
    return done;
  }
  override async room() {
    return { size: this.size, used: this.used, release: this.active() === null ? 0 : this.exchange };
  }
}
const offload = (handoff = "done") => ({ name: "offload_lora", arguments: { handoff } });
const search = { name: "search", arguments: { query: "q" } };

describe("hard policy", () => {
  it("runs plan -> search -> write, each ended by its own exit call; the final stage's text is the answer", async () => {
    const d = new ScriptedDriver({
      plan: [{ text: "plan: find the river", calls: [offload("plan")] }],
      search: [{ calls: [search] }, { text: "found: the Seine", calls: [offload("evidence")] }],
      write: [{ text: "The Seine.\nAnswer: Seine", calls: [offload()] }],
    });
    const { ctx, trace } = context(d);
    const r = await runHard(ctx, ["plan", "search", "write"], budget());
    expect(r.stages).toEqual(["plan", "search", "write"]);
    expect(extractAnswer(r.text).answer).toBe("Seine");
    expect(d.log).toEqual([
      "load:plan:harness",
      "gen:plan->offload_lora",
      "offload:plan:model",
      "load:search:harness",
      "gen:search->search",
      "tool:search",
      "gen:search->offload_lora",
      "offload:search:model",
      "load:write:harness",
      "gen:write->offload_lora",
      "offload:write:model",
    ]);
    expect(trace.events.filter((e) => e.type === "stage_end").map((e) => e.end)).toEqual([
      "exit_call",
      "exit_call",
      "exit_call",
    ]);
    // each stage tells the engine what follows it: the base (its release), then the next stage's adapter
    expect(d.plans).toEqual([[null, "search"], [null, "write"], [null]]);
  });

  it("ends stages on every budget and the no-tool threshold, recording a synthetic offload that says why", async () => {
    const cases: [Partial<StageBudget>, Planned[], string][] = [
      [
        { turns: 2, noToolTurns: 9 },
        [{ calls: [search] }, { calls: [search] }, { calls: [search] }],
        "turn budget (2) spent",
      ],
      [
        { tokens: 25 },
        [{ calls: [search], tokens: 20 }, { calls: [search], tokens: 20 }, { calls: [search] }],
        "token budget (25) spent",
      ],
      [{ toolCalls: 1 }, [{ calls: [search] }, { calls: [search] }], "tool-call budget (1) spent"],
      [{ noToolTurns: 2 }, [{ text: "thinking" }, { text: "still thinking" }], "2 turns without a tool call"],
      [{ seconds: 0.000001 }, [{ calls: [search] }], "time budget (0.000001 s) spent"],
    ];
    for (const [b, plan, reason] of cases) {
      const d = new ScriptedDriver({ plan: [...plan] });
      const { ctx } = context(d);
      await runHard(ctx, ["plan"], budget(b));
      expect(d.log.at(-1), reason).toBe(`offload:plan:harness(stage ended by the harness: ${reason})`);
      // a spent tool-call budget ends the stage before its next turn, as the server's release does
      if (b.toolCalls === 1) expect(d.log.filter((l) => l.startsWith("gen:"))).toEqual(["gen:plan->search"]);
    }
  });

  it("falls back to the base model for a missing adapter or a failing stage, and says so in the trace", async () => {
    const d = new ScriptedDriver(
      {
        plan: [{ throws: "engine exploded" }],
        base: [{ text: "base plan" }, { text: "base plan 2" }, { text: "base answer" }, { text: "Answer: 42" }],
      },
      ["plan", "write"],
    );
    const { ctx, trace } = context(d);
    const r = await runHard(ctx, ["plan", "search"], budget({ noToolTurns: 2 }));
    expect(r.stages).toEqual(["base", "base"]);
    const fallbacks = trace.events.filter((e) => e.type === "fallback").map((e) => e.reason);
    expect(fallbacks).toEqual([
      "stage failed: engine exploded",
      "the library has no such adapter; the base model runs this stage",
    ]);
    expect(d.log).toContain("offload:plan:harness(stage failed: engine exploded; the base model continues)");
    expect(r.text).toBe("Answer: 42");
  });
});

describe("degenerate turns", () => {
  it("are recorded as they come, with the run's turn number, without changing how the stages run", async () => {
    const loop = "Look up the birth: offload_lora, arguments: handoff, ".repeat(8);
    const d = new ScriptedDriver({
      plan: [{ text: "plan: find the river", calls: [offload("plan")] }],
      search: [{ text: loop }, { text: loop }],
      write: [{ text: "Answer: Seine", calls: [offload()] }],
    });
    const { ctx, trace } = context(d);
    const r = await runHard(ctx, ["plan", "search", "write"], budget());
    expect(r.stages).toEqual(["plan", "search", "write"]);
    expect(
      trace.events.filter((e) => e.type === "degenerate").map((e) => [e.rule, e.stage, e.adapter, e.turn]),
    ).toEqual([
      ["repetition", "2:search", "search", 2],
      ["repetition", "2:search", "search", 3],
    ]);
    expect(ctx.degenerate).toMatchObject({ rule: "repetition", stage: "2:search", turn: 2 });
    expect(ctx.degenerateTurns).toBe(2);
  });
});

describe("hard policy in a window that fills", () => {
  it("each stage keeps its own release and a load and release per later stage: every stage runs under its adapter, the last too", async () => {
    // a window with room for the three stages' exchanges and little more: each stage writes until the window ends it
    const d = new FillingDriver(3000, 1000, 100);
    const { ctx, trace } = context(d);
    const r = await runHard(ctx, ["plan", "search", "write"], budget({ turns: 1000, noToolTurns: 1000, tokens: 1e6 }));
    // a stage keeping less (half of it, or one exchange per later stage) leaves the next one no room for its load:
    // it falls back to the base
    expect(trace.events.filter((e) => e.type === "fallback")).toEqual([]);
    expect(r.stages).toEqual(["plan", "search", "write"]);
    const ends = trace.events.filter((e) => e.type === "stage_end");
    expect(ends.map((e) => [e.stage, e.end, e.active])).toEqual([
      ["1:plan", "context", null],
      ["2:search", "context", null],
      ["3:write", "context", null],
    ]);
    for (const e of ends) expect(e.turns, String(e.stage)).toBeGreaterThan(0);
    expect(d.log.filter((l) => l.startsWith("load:"))).toEqual([
      "load:plan:harness",
      "load:search:harness",
      "load:write:harness",
    ]);
  });
});

describe("hard policy after a failed weight action", () => {
  it("a failed release is retried before the next stage, which then runs under its own adapter; a failed load runs the stage on the base", async () => {
    const d = new ScriptedDriver({
      plan: [{ text: "plan" }],
      search: [{ text: "evidence" }],
      base: [{ text: "Answer: Seine" }],
    });
    d.failing = { offloads: 2, loads: 0 };
    const { ctx, trace } = context(d);
    const r = await runHard(ctx, ["plan", "search", "write"], budget({ noToolTurns: 1 }));
    // plan's release fails twice (with its handoff, then without); stage 2 releases plan before loading search
    const gens = d.log.filter((l) => l.startsWith("gen:") || l.startsWith("load:") || l.startsWith("offload:"));
    expect(gens.slice(0, 5)).toEqual([
      "load:plan:harness",
      "gen:plan",
      expect.stringMatching(/^offload:plan:harness/),
      expect.stringMatching(/^offload:plan:harness/),
      expect.stringMatching(/^offload:plan:harness\(the previous stage's release failed/),
    ]);
    expect(trace.events.find((e) => e.type === "stage_end" && e.stage === "1:plan")).toMatchObject({ active: "plan" });
    expect(trace.events.filter((e) => e.type === "stage_start").map((e) => [e.stage, e.adapter])).toEqual([
      ["1:plan", "plan"],
      ["2:search", "search"],
      ["3:write", "write"],
    ]);
    expect(r.stages).toEqual(["plan", "search", "write"]);

    const failedLoad = new ScriptedDriver({ base: [{ text: "Answer: Seine" }] });
    failedLoad.failing = { offloads: 0, loads: 1 };
    const run = context(failedLoad);
    const r2 = await runHard(run.ctx, ["write"], budget({ noToolTurns: 1 }));
    expect(r2).toMatchObject({ stages: ["base"], text: "Answer: Seine" });
    expect(run.trace.events.find((e) => e.type === "fallback")).toMatchObject({
      runsOn: "base",
      reason: "load failed: load failed",
    });
    expect(run.trace.events.find((e) => e.type === "stage_start")).toMatchObject({ adapter: "base" });
  });

  it("a session that cannot return to the base stops the run instead of running a stage under the wrong weights", async () => {
    const d = new ScriptedDriver({ plan: [{ text: "the plan" }] });
    d.failing = { offloads: 99, loads: 0 };
    const { ctx, trace } = context(d);
    const r = await runHard(ctx, ["plan", "search", "write"], budget({ noToolTurns: 1 }));
    expect(r).toMatchObject({ stopped: true, stages: ["plan"], text: "the plan" });
    expect(d.log.filter((l) => l.startsWith("gen:"))).toEqual(["gen:plan"]);
    expect(trace.events.filter((e) => e.type === "stage_start")).toHaveLength(1);
    expect(trace.events.at(-1)).toMatchObject({
      type: "fallback",
      reason: expect.stringMatching(/could not return to the base model/),
    });
  });
});

describe("soft policy", () => {
  const limits = (l: Partial<typeof DEFAULT_SOFT_LIMITS> = {}) => layered(DEFAULT_SOFT_LIMITS, l);

  it("lets the base choose: load, work, release, then answer from write", async () => {
    const d = new ScriptedDriver({
      base: [
        { calls: [{ name: "load_lora", arguments: { adapter: "search" } }] },
        { calls: [{ name: "load_lora", arguments: { adapter: "write" } }] },
      ],
      search: [{ calls: [search] }, { calls: [offload()] }],
      write: [{ text: "Answer: Seine", calls: [offload()] }],
    });
    const { ctx } = context(d);
    const r = await runSoft(ctx, limits(), budget(), "write");
    expect(r.stages).toEqual(["search", "write"]);
    expect(r.text).toBe("Answer: Seine");
    expect(d.log.filter((l) => l.startsWith("load"))).toEqual(["load:search:model", "load:write:model"]);
  });

  it("gives the base a closing turn after write released itself; a call there is refused and the answer stands", async () => {
    const load = (adapter: string) => ({ calls: [{ name: "load_lora", arguments: { adapter } }] });
    const ended = new ScriptedDriver({
      base: [load("write"), { text: "" }],
      write: [{ text: "Answer: Seine", calls: [offload()] }],
    });
    const r = await runSoft(context(ended).ctx, limits(), budget(), "write");
    expect(r.text).toBe("Answer: Seine");
    expect(ended.log.filter((l) => l.startsWith("gen:"))).toEqual([
      "gen:base->load_lora",
      "gen:write->offload_lora",
      "gen:base",
    ]);
    const reopened = new ScriptedDriver({
      base: [load("write"), load("write")],
      write: [{ text: "Answer: Seine", calls: [offload()] }],
    });
    const { ctx, trace } = context(reopened);
    const again = await runSoft(ctx, limits(), budget(), "write");
    expect(again.text).toBe("Answer: Seine");
    expect(reopened.log.filter((l) => l.startsWith("load"))).toEqual(["load:write:model"]);
    expect(reopened.log.filter((l) => l.startsWith("reject"))).toEqual([
      "reject:c3:load_lora refused: the write stage gave the answer and the run is over; end your turn",
    ]);
    expect(trace.events.find((e) => e.type === "guard")).toMatchObject({ rule: "termination" });
  });

  it("refuses a reload of the adapter just released with no new tool result, and allows it after one", async () => {
    const load = (adapter: string) => ({ calls: [{ name: "load_lora", arguments: { adapter } }] });
    const d = new ScriptedDriver({
      base: [load("search"), load("search"), { calls: [search] }, load("search"), load("write")],
      search: [{ calls: [offload()] }, { calls: [offload()] }],
      write: [{ text: "Answer: x", calls: [offload()] }],
    });
    const { ctx, trace } = context(d);
    await runSoft(ctx, limits(), budget(), "write");
    expect(d.log.filter((l) => l.startsWith("reject"))).toEqual([
      'reject:c3:load_lora refused: "search" was just released and no new tool result arrived since; do something else first',
    ]);
    expect(d.log.filter((l) => l === "load:search:model")).toHaveLength(2);
    expect(trace.events.filter((e) => e.type === "guard").map((e) => e.rule)).toEqual(["repetition"]);
  });

  it("enforces revisit and switch limits", async () => {
    const load = (adapter: string) => ({ calls: [{ name: "load_lora", arguments: { adapter } }] });
    const d = new ScriptedDriver(
      {
        base: [
          load("plan"),
          { calls: [search] },
          load("plan"),
          { calls: [search] },
          load("plan"),
          { text: "Answer: y" },
        ],
        plan: [{ calls: [offload()] }, { calls: [offload()] }],
      },
      ["plan"],
    );
    const { ctx } = context(d);
    await runSoft(ctx, limits({ revisitsPerAdapter: 1 }), budget(), "write");
    expect(d.log.filter((l) => l.startsWith("reject"))).toEqual([
      'reject:c7:load_lora refused: "plan" was already used 2 times (limit: 1 revisits)',
    ]);
    const d2 = new ScriptedDriver(
      {
        base: [load("plan"), { calls: [search] }, load("plan"), { text: "Answer: z" }],
        plan: [{ calls: [offload()] }],
      },
      ["plan"],
    );
    await runSoft(context(d2).ctx, limits({ switches: 2 }), budget(), "write");
    expect(d2.log.filter((l) => l.startsWith("reject"))).toEqual([
      "reject:c4:load_lora refused: the run's 2 weight switches are spent; answer with what you have",
    ]);
  });

  it("tells the base once that the answer must come from write, then accepts its answer", async () => {
    const d = new ScriptedDriver({ base: [{ text: "Answer: early" }, { text: "Answer: still mine" }] });
    const { ctx } = context(d);
    const r = await runSoft(ctx, limits(), budget(), "write");
    expect(d.log.filter((l) => l.startsWith("note"))).toEqual([
      'note:Before answering, load the "write" capability with load_lora: the final answer must be written by it.',
    ]);
    expect(r.text).toBe("Answer: still mine");
  });

  it("takes the writer from the workflow, not from an alias: a renamed library keeps its coverage guard", async () => {
    const d = new ScriptedDriver({ base: [{ text: "Answer: early" }, { text: "Answer: still mine" }] }, [
      "outline",
      "lookup",
      "scribe",
    ]);
    await runSoft(context(d).ctx, limits(), budget(), "scribe");
    expect(d.log.filter((l) => l.startsWith("note"))).toEqual([
      'note:Before answering, load the "scribe" capability with load_lora: the final answer must be written by it.',
    ]);
    // a workflow whose writer the library lacks forces nothing: the base's answer stands
    const none = new ScriptedDriver({ base: [{ text: "Answer: mine" }] }, ["outline", "lookup", "scribe"]);
    const r = await runSoft(context(none).ctx, limits(), budget(), "write");
    expect(none.log.filter((l) => l.startsWith("note"))).toEqual([]);
    expect(r.text).toBe("Answer: mine");
  });

  it("forces a final write stage when the run's limits end it", async () => {
    const d = new ScriptedDriver({
      base: [{ calls: [search] }, { calls: [search] }, { calls: [search] }],
      write: [{ text: "Answer: forced", calls: [offload()] }],
    });
    const { ctx, trace } = context(d);
    const r = await runSoft(ctx, limits({ turns: 2 }), budget(), "write");
    expect(d.log).toContain("load:write:harness");
    expect(r.text).toBe("Answer: forced");
    expect(trace.events.find((e) => e.type === "guard")).toMatchObject({ rule: "termination", limit: "turns" });
  });
});

describe("comparison modes and accounting", () => {
  it("fixed weights: tools until an answer", async () => {
    const d = new ScriptedDriver({ base: [{ calls: [search] }, { text: "Answer: b" }] });
    const r = await runFixed(context(d).ctx, layered(DEFAULT_SOFT_LIMITS, {}), "base");
    expect(r).toEqual({ text: "Answer: b", stages: ["base"] });
  });

  it("partitions time into categories with under 1% unattributed", async () => {
    const d = new ScriptedDriver({
      plan: [{ calls: [offload()] }],
      search: [{ calls: [search] }, { calls: [offload()] }],
      write: [{ text: "Answer: t", calls: [offload()] }],
    });
    // work of a realistic length: event-loop jitter between timers (a few ms with two test files on two cores) stays
    // well under 1%
    d.workMs = 60;
    const { ctx, trace } = context(d);
    await runHard(ctx, ["plan", "search", "write"], budget());
    const t = trace.end();
    expect(t.cacheRebuild).toBe(12); // 6 switches x 2 ms moved out of adapter control
    expect(Object.keys(t.model).sort()).toEqual(["plan", "search", "write"]);
    expect(Math.abs(t.unattributedShare)).toBeLessThan(0.01);
  });

  it("extracts marked answers and judges them", () => {
    expect(extractAnswer("reasoning\nAnswer: The Seine\n")).toEqual({ answer: "The Seine", marked: true });
    expect(extractAnswer("so \\boxed{\\frac{1}{2}} it is")).toEqual({ answer: "\\frac{1}{2}", marked: true });
    expect(extractAnswer("just text")).toEqual({ answer: "just text", marked: false });
    expect(judge("The Seine.", "the seine")).toEqual({ exact: true, contains: true });
    expect(judge("It is the Seine river", ["Seine"])).toEqual({ exact: false, contains: true });
  });
});
