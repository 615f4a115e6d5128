import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import { call, callError, connectClient, testConfig, type Connected } from "../helpers/server.js";

/**
 * The context window as a budget, on the real engine in a spawned server. The demo model's prompt (system
 * prompt, tool documentation, a load exchange) takes about 2,500 of its byte-level tokens, so a 3,072-token
 * window leaves a few hundred for the whole run: every stage must end on the window, never the run.
 */
const traceDir = join(tempDir(), "traces");
const SMALL = testConfig({
  model: { contextSize: 3072 },
  harness: { maxTokensPerTurn: 96, traceDir, contextReserveTokens: 200, stage: { turns: 3 } },
});
const LONG = { timeout: 300_000 };
let c: Connected;

interface Event {
  type: string;
  [k: string]: unknown;
}
interface RunResult {
  finish: string;
  answer: string;
  stages: string[];
  trace_uri: string;
}
const readTrace = async (uri: string) =>
  JSON.parse(((await c.client.readResource({ uri })).contents[0] as { text: string }).text) as Event[];

beforeAll(async () => {
  c = await connectClient("stdio", undefined, {}, SMALL);
});
afterAll(async () => c?.close());

describe("a run never fails on the window", () => {
  it.each(["hard", "soft"])(
    "%s: stages end on the window with a synthetic release, the run returns finish: context",
    async (policy) => {
      const steering = [{ adapter: "base", turn: 1, tool: "load_lora" }];
      // budgets generous enough that only the window can end the stage the model is in
      const r = await call<RunResult>(
        c.client,
        "run_task",
        {
          task: "Which river flows through Paris?",
          policy,
          seed: 1,
          steering,
          budgets: { turns: 20, noToolTurns: 20 },
        },
        LONG,
      );
      expect(r.finish).toBe("context");
      const events = await readTrace(r.trace_uri);
      expect(events.at(-1)).toMatchObject({ type: "run_end", finish: "context" });
      const ends = events.filter((e) => e.type === "stage_end");
      expect(ends.some((e) => e.end === "context")).toBe(true);
      // every stage ended on the base: its release was made, and no stage ran under another stage's weights
      for (const e of ends) expect(e.active).toBeNull();
      for (const s of events.filter((e) => e.type === "stage_start"))
        expect([String(s.stage).split(":")[1], "base"]).toContain(s.adapter);
      const control = events.filter((e) => e.type === "adapter_control");
      expect(control.every((e) => e.ok)).toBe(true);
      if (policy === "hard") {
        // the window affords one load/release pair: it goes to the final stage, earlier ones run on the base
        expect(r.stages.at(-1)).toBe("write");
        const fallbacks = events.filter((e) => e.type === "fallback");
        expect(fallbacks.length).toBe(r.stages.filter((s) => s === "base").length);
        for (const f of fallbacks)
          expect(f).toMatchObject({ runsOn: "base", reason: expect.stringMatching(/context window has no room/) });
      } else expect(ends.at(-1)).toMatchObject({ end: "context", stage: expect.stringMatching(/:write$/) });
      // no turn generated past the window: every model call's prompt plus output fits
      for (const m of events.filter((e) => e.type === "model_call")) {
        const t = m.tokens as { prompt: number; generated: number };
        expect(t.prompt + t.generated).toBeLessThanOrEqual(3072);
      }
    },
  );
});

describe("client-driven generate in a small window", () => {
  it("clamps a turn to the window (finish_reason length, context_remaining) and refuses one that cannot fit, naming model.contextSize", async () => {
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", { task: "fill the window" });
    let last:
      { finish_reason: string; context_remaining: number; tokens: { prompt: number; generated: number } } | undefined;
    for (let i = 0; i < 20; i++) {
      last = await call(c.client, "generate", { session_id, max_tokens: 512 }, LONG);
      expect(last!.tokens.generated).toBeLessThanOrEqual(512);
      expect(last!.context_remaining).toBe(3072 - last!.tokens.prompt - last!.tokens.generated);
      if (last!.context_remaining <= 8) break;
    }
    expect(last!.finish_reason).toBe("length");
    expect(last!.context_remaining).toBeLessThanOrEqual(8);
    const before = await call<{ history: unknown[] }>(c.client, "get_session", { session_id });
    const error = await callError(c.client, "generate", { session_id, max_tokens: 16 });
    expect(error).toMatch(/needs \d+ tokens but the session's context holds 3072; .*model\.contextSize/);
    const after = await call<{ history: unknown[] }>(c.client, "get_session", { session_id });
    expect(after.history).toEqual(before.history);
    await call(c.client, "close_session", { session_id });
  });
});

describe("a 2048-token window, smaller than the demo's prompt", () => {
  it("hard and soft runs, seeds 1 to 3, end with finish: context and no error; nothing runs under weights it could not release", async () => {
    const tiny = await connectClient(
      "stdio",
      undefined,
      {},
      testConfig({ model: { contextSize: 2048 }, harness: { traceDir } }),
    );
    try {
      for (const policy of ["hard", "soft"]) {
        for (const seed of [1, 2, 3]) {
          const r = await call<RunResult>(
            tiny.client,
            "run_task",
            {
              task: "Which river flows through Paris?",
              policy,
              seed,
              steering: [{ adapter: "base", turn: 1, tool: "load_lora" }],
            },
            LONG,
          );
          expect(r.finish, `${policy} seed ${seed}`).toBe("context");
          const events = JSON.parse(
            ((await tiny.client.readResource({ uri: r.trace_uri })).contents[0] as { text: string }).text,
          ) as Event[];
          expect(events.filter((e) => e.type === "model_call")).toEqual([]);
          expect(events.filter((e) => e.type === "adapter_control" && e.ok)).toEqual([]);
          expect(events.at(-1)).toMatchObject({ type: "run_end", finish: "context" });
        }
      }
    } finally {
      await tiny.close();
    }
  });
});
