import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalEngine } from "../../src/engines/local/index.js";
import { ensureFamilySet, QUANT_NAMES, type QuantName } from "../../src/demo/familySets.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { maxAbsDiff, quietLogger, TEST_THREADS } from "./engine.js";
import { tempDir } from "./files.js";
import { call, connectClient, testConfig, type Connected } from "./server.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";
import { extractAnswer } from "../../src/harness/answer.js";
import { FINISHES } from "../../src/harness/types.js";
import { readTrace } from "./results.js";

/** The random demo models rarely end a string argument on their own; a bias on the quote token makes them. */
const Q = { '"': 8 };
const TOLERANCE = 1e-4;
const LIBRARY = ["plan", "search", "write"];

interface Generated {
  tool_calls: { id: string; name: string; arguments: Record<string, unknown> }[];
  finish_reason: string;
  adapter: string | null;
  logprobs?: { token: number; logprob: number }[];
}

/**
 * One family's row of the matrix, a cell per quant type: a spawned server (stdio, one thread) serving the
 * family's generated set, driven through MCP like any client: steered weight actions and an external tool
 * call parsed by the family's chat wrapper and answered; on F16 the hard harness completes a task and reports how it
 * ended as its own trace shows it (random weights cannot answer right: the test holds it to being honest). Beside it
 * the engine on the same file: after each switch the next-token log-probs equal the reference replaying the
 * cache's decodes (llama.cpp's numerics depend on the batch split, so only a replay is exact).
 */
export function describeFamilyMatrix(family: string): void {
  describe.each<QuantName>(QUANT_NAMES)(`${family} %s`, (quant) => {
    let c: Connected;
    let engine: LocalEngine;
    beforeAll(async () => {
      const set = ensureFamilySet(PACKAGE_ROOT, family, quant);
      const config = testConfig({
        model: { path: set.model, contextSize: 8192, sequencesPerContext: 2, maxContexts: 1 },
        adapters: { manifest: set.adapters },
        harness: { maxTokensPerTurn: 48, traceDir: join(tempDir(), "traces"), stage: { turns: 2 } },
      });
      const load = async () => {
        const engine = await LocalEngine.load({
          modelPath: set.model,
          gpu: false,
          threads: TEST_THREADS,
          contextSize: 8192,
          sequencesPerContext: 2,
          maxContexts: 1,
          logger: quietLogger(),
        });
        for (const alias of LIBRARY)
          await engine.addAdapter({ alias, filePath: join(dirname(set.adapters), `${alias}.gguf`), scale: 1 });
        return engine;
      };
      [c, engine] = await Promise.all([connectClient("stdio", undefined, {}, config), load()]);
    });
    afterAll(async () => {
      await c?.close();
      await engine?.dispose();
    });

    const steered = (id: string, name: string) =>
      call<Generated>(c.client, "generate", {
        session_id: id,
        max_tokens: 160,
        tool_call: { name },
        seed: 1,
        token_bias: Q,
      });

    it("after every switch of a scripted trajectory the cache gives the replayed reference's next-token log-probs", async () => {
      const session = await engine.openSession();
      const diffs: number[] = [];
      try {
        let steps = 1;
        await session.prefill(scriptedTrajectory(steps));
        for (const adapter of ["plan", null, "search"]) {
          const conv = scriptedTrajectory(++steps);
          await session.switchWeights(adapter, conv);
          const replay = session.cacheReplay();
          const got = await session.nextTokenLogProbs(conv);
          diffs.push(
            maxAbsDiff(await referenceNextTokenLogProbs(engine, adapter, engine.renderTokens(conv), replay), got),
          );
        }
      } finally {
        await session.close();
      }
      expect(Math.max(...diffs)).toBeLessThanOrEqual(TOLERANCE);
    });

    it("loads with the library resident; steered load_lora and search are parsed as calls through the family's wrapper and answered", async () => {
      const { session_id: id } = await call<{ session_id: string }>(c.client, "create_session", {
        task: "Which river flows through Paris?",
      });
      const free = await call<Generated & { text: string }>(c.client, "generate", { session_id: id, max_tokens: 8 });
      expect(free.adapter).toBeNull();

      const load = await steered(id, "load_lora");
      expect(load.finish_reason, JSON.stringify(load)).toBe("tool_calls");
      expect(load.tool_calls.map((t) => t.name)).toEqual(["load_lora"]);
      const chosen = load.tool_calls[0]!.arguments.adapter as string;
      expect(LIBRARY).toContain(chosen);
      const loaded = await call<{ active_adapter: string }>(c.client, "load_lora", {
        session_id: id,
        call_id: load.tool_calls[0]!.id,
      });
      expect(loaded.active_adapter).toBe(chosen);

      const search = await steered(id, "search");
      expect(search.tool_calls.map((t) => t.name)).toEqual(["search"]);
      const query = search.tool_calls[0]!.arguments.query;
      expect(typeof query).toBe("string");
      // the quote bias may end the random model's string at once; the tool refuses an empty query
      const answered = await call<{ call_id: string }>(c.client, "search", {
        session_id: id,
        call_id: search.tool_calls[0]!.id,
        query: (query as string).trim() || "Seine",
      });
      expect(answered.call_id).toBe(search.tool_calls[0]!.id);

      // a prescribed release (the model's own offload_lora is the harness test's)
      const released = await call<{ active_adapter: string | null }>(c.client, "offload_lora", {
        session_id: id,
        handoff: "evidence found",
      });
      expect(released.active_adapter).toBeNull();
      const after = await call<Generated>(c.client, "generate", { session_id: id, max_tokens: 4 });
      expect(after.adapter).toBeNull();
      await call(c.client, "close_session", { session_id: id });
    });

    it.runIf(quant === "F16")("the hard harness completes a task (plan -> search -> write)", async () => {
      const steering = [
        { adapter: "plan", turn: 1, tool: "offload_lora", bias: Q },
        { adapter: "search", turn: 1, tool: "search", bias: Q },
        { adapter: "search", turn: 2, tool: "offload_lora", bias: Q },
      ];
      const r = await call<{
        stages: string[];
        finish: string;
        answer: string;
        marked: boolean;
        text: string;
        trace_uri: string;
        degenerate?: { turn: number; turns: number };
      }>(
        c.client,
        "run_task",
        { task: "Which river flows through Paris?", policy: "hard", steering, seed: 1, budgets: { noToolTurns: 1 } },
        { timeout: 300_000 },
      );
      expect(r.stages).toEqual(["plan", "search", "write"]);
      expect(FINISHES).toContain(r.finish);
      // the finish the run's own events imply: a window of 8192 tokens never ends it, every release succeeds; then
      // degenerate output comes first, then a final stage that spent a budget
      const events = await readTrace(c.client, r.trace_uri);
      const flagged = events.filter((e) => e.type === "degenerate");
      const last = events.filter((e) => e.type === "stage_end").at(-1)!;
      expect(last).toMatchObject({ stage: "3:write", active: null });
      const implied = flagged.length ? "degenerate" : String(last.end).startsWith("budget:") ? "budget" : "answer";
      expect(r.finish).toBe(implied);
      expect(events.at(-1)).toMatchObject({ type: "run_end", finish: r.finish });
      // the text is the final stage's last words; an answer is taken from it unless the output degenerated
      const written = events.filter((e) => e.type === "model_call" && e.stage === "3:write" && String(e.text).trim());
      expect(r.text).toBe(written.length ? written.at(-1)!.text : "");
      if (r.finish === "degenerate") {
        expect(r).toMatchObject({ answer: "", marked: false });
        expect(r.degenerate).toMatchObject({ turn: flagged[0]!.turn, turns: flagged.length });
      } else {
        expect(r.degenerate).toBeUndefined();
        expect({ answer: r.answer, marked: r.marked }).toEqual(extractAnswer(r.text));
      }
    });
  });
}
