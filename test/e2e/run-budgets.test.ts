import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import { call, connectClient, testConfig, type Connected } from "../helpers/server.js";

/**
 * A run's own budgets govern both the harness and the server-side release, in both directions; and a long
 * run_task stays alive for a client whose request timeout is reset by progress notifications.
 */
const traceDir = join(tempDir(), "traces");
const config = testConfig({
  model: { contextSize: 16384 },
  harness: { maxTokensPerTurn: 8, traceDir, stage: { noToolTurns: 3 } },
});
let c: Connected;

interface Event {
  type: string;
  [k: string]: unknown;
}
const readTrace = async (uri: string) =>
  JSON.parse(((await c.client.readResource({ uri })).contents[0] as { text: string }).text) as Event[];

beforeAll(async () => {
  c = await connectClient("stdio", undefined, {}, config);
});
afterAll(async () => c?.close());

describe("run_task budgets over the config's", () => {
  it.each([
    [5, "above"],
    [1, "below"],
  ])(
    "noToolTurns %i (%s the config's 3): the stage runs exactly that many turns under its adapter, released by the harness",
    async (noToolTurns) => {
      const r = await call<{ trace_uri: string; finish: string }>(
        c.client,
        "run_task",
        { task: "budgeted", policy: "hard", workflow: ["plan"], seed: 1, budgets: { noToolTurns } },
        { timeout: 300_000 },
      );
      const events = await readTrace(r.trace_uri);
      const turns = events.filter((e) => e.type === "model_call");
      expect(turns.map((e) => e.adapter)).toEqual(Array(noToolTurns).fill("plan"));
      const releases = events.filter((e) => e.type === "adapter_control" && e.action === "offload");
      expect(releases).toHaveLength(1);
      expect(releases[0]).toMatchObject({ author: "harness", ok: true, cause: "no_tool" });
      const history = events.find((e) => e.type === "history")!.messages as {
        role: string;
        name?: string;
        content: string;
      }[];
      // the server never released the adapter on its own (its message would say "ended by the server")
      expect(history.filter((m) => m.role === "tool" && m.name === "offload_lora").map((m) => m.content)).toEqual([
        expect.stringMatching(
          new RegExp(`\\[stage ended by the harness: ${noToolTurns} turns without a tool call\\]$`),
        ),
      ]);
      expect(r.finish).toBe("answer");
    },
  );
});

describe("progress", () => {
  // 12 s, not longer: the random demo model's 8-token turns, each with its markup, fill its 16,384-token window in
  // about 20 s on a fast machine, and the window would end the run before its budget
  it("a client with resetTimeoutOnProgress and a 6 s timeout completes a 12 s run_task; notifications come at least every 5 s", async () => {
    const at: number[] = [];
    const started = Date.now();
    const r = await c.client.callTool(
      {
        name: "run_task",
        arguments: {
          task: "a long run",
          policy: "hard",
          workflow: ["plan"],
          seed: 2,
          budgets: { seconds: 12, turns: 10_000, noToolTurns: 10_000, tokens: 1_000_000 },
        },
      },
      undefined,
      { timeout: 6_000, resetTimeoutOnProgress: true, onprogress: () => void at.push(Date.now()) },
    );
    const wall = Date.now() - started;
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ finish: "budget" });
    expect(wall).toBeGreaterThan(12_000);
    const gaps = [at[0]! - started, ...at.slice(1).map((t, i) => t - at[i]!), Date.now() - at.at(-1)!];
    expect(Math.max(...gaps)).toBeLessThan(5_000);
  });
});
