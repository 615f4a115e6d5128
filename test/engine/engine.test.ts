import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Llama, LlamaContext, LlamaContextSequence, LlamaModel } from "node-llama-cpp";
import type { LocalEngine } from "../../src/engines/local/index.js";
import { SteeredCallError, type Conversation } from "../../src/engine/index.js";
import { conversation, demoEngine, demo, maxAbsDiff } from "../helpers/engine.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

let engine: LocalEngine;
const conv = conversation("Which river flows through Paris, and how long is it?");

beforeAll(async () => {
  engine = await demoEngine();
  await engine.addAdapter({ alias: "code", filePath: demo.adapters.code!, scale: 1 });
  await engine.addAdapter({ alias: "write-v2", filePath: demo.adapters["write-v2"]!, scale: 1 });
});
afterAll(async () => engine?.dispose());

describe("engine on the demo model", () => {
  it("keeps the node-llama-cpp internals it relies on (fails loudly on an upgrade that drops them)", () => {
    expect(typeof (LlamaContext.prototype as unknown as Record<string, unknown>)._setLoras).toBe("function");
    expect(typeof (LlamaModel.prototype as unknown as Record<string, unknown>)._getOrLoadLora).toBe("function");
    expect(typeof (LlamaContextSequence.prototype as unknown as Record<string, unknown>)._decodeTokens).toBe(
      "function",
    );
    expect(typeof (Llama as unknown as Record<string, unknown>)._create).toBe("function");
  });

  it("resolves the Qwen chat wrapper from the embedded Qwen3 template", () => {
    expect(engine.model.chatWrapper).toBe("Qwen");
    expect(engine.model.architecture).toBe("qwen3");
  });

  it("each adapter moves the next-token distribution away from the base (max |delta log-prob| >= 0.1)", async () => {
    const tokens = engine.renderTokens(conv);
    const base = await referenceNextTokenLogProbs(engine, null, tokens);
    const figures: Record<string, number> = {};
    for (const alias of ["plan", "search", "write", "code", "write-v2"]) {
      figures[alias] = maxAbsDiff(base, await referenceNextTokenLogProbs(engine, alias, tokens));
      expect(figures[alias]).toBeGreaterThanOrEqual(0.1);
    }
    console.log("max |delta log-prob| vs base:", figures);
  });

  it("after a switch the rebuilt cache gives exactly a fresh context's next-token log-probs", async () => {
    const session = await engine.openSession();
    try {
      await session.nextTokenLogProbs(conv); // fill the cache under the base weights first
      for (const alias of ["plan", "search", "write"]) {
        await session.switchWeights(null, conv);
        const report = await session.switchWeights(alias, conv);
        expect(report.rebuild.tokens).toBe(engine.renderTokens(conv).length - 1);
        const got = await session.nextTokenLogProbs(conv);
        // in the cache's own batch split (its first decode stops where the shared prompt prefix ends, to save it)
        const want = await referenceNextTokenLogProbs(engine, alias, engine.renderTokens(conv), session.cacheReplay());
        expect(maxAbsDiff(want, got)).toBeLessThanOrEqual(1e-4);
      }
    } finally {
      await session.close();
    }
  });

  it("sessions on different adapters evaluated concurrently each get their own adapter's result", async () => {
    const sessions = await Promise.all(["plan", "search", "write", null].map(() => engine.openSession()));
    const aliases = ["plan", "search", "write", null] as const;
    const convs: Conversation[] = aliases.map((a, i) =>
      conversation(`Question ${i}: what does adapter ${a ?? "base"} see?`),
    );
    try {
      await Promise.all(sessions.map((s, i) => s.switchWeights(aliases[i]!, convs[i]!)));
      for (let round = 0; round < 2; round++) {
        const got = await Promise.all(sessions.map((s, i) => s.nextTokenLogProbs(convs[i]!)));
        for (const [i, alias] of aliases.entries()) {
          const want = await referenceNextTokenLogProbs(
            engine,
            alias,
            engine.renderTokens(convs[i]!),
            sessions[i]!.cacheReplay(),
          );
          expect(maxAbsDiff(want, got[i]!)).toBeLessThanOrEqual(1e-4);
        }
      }
      // interleaved generations too: each one's first-token log-prob is its own adapter's
      const replays = sessions.map((s) => s.cacheReplay()); // the prompts are cached already: generation adds to these
      const results = await Promise.all(
        sessions.map((s, i) => s.generate(convs[i]!, { maxTokens: 4, topLogprobs: 1 })),
      );
      for (const [i, alias] of aliases.entries()) {
        const want = await referenceNextTokenLogProbs(engine, alias, engine.renderTokens(convs[i]!), replays[i]);
        const first = results[i]!.logprobs![0]!;
        expect(Math.abs(first.logprob - want.get(first.token)!)).toBeLessThanOrEqual(1e-4);
        expect(results[i]!.adapter).toBe(alias);
      }
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
  });

  it("drops a call whose caller gave up while it waited: no weights applied, nothing evaluated, nothing generated", async () => {
    const session = await engine.openSession();
    try {
      await session.switchWeights("plan", conv);
      const gaveUp = new AbortController();
      gaveUp.abort();
      const result = await session.generate(conversation("A question asked and abandoned while it queued."), {
        maxTokens: 32,
        signal: gaveUp.signal,
      });
      expect(result).toMatchObject({ finishReason: "cancelled", text: "", calls: [] });
      expect(result.tokens).toMatchObject({ evaluated: 0, generated: 0 });
      expect(result.timings).toMatchObject({ prefillMs: 0, decodeMs: 0 });
    } finally {
      await session.close();
    }
  });

  it("a steered call is refused up front when max_tokens cannot hold it, and otherwise comes back as a call within max_tokens", async () => {
    // every kind of value node-llama-cpp's grammar can hold open while the closing is forced
    const record: Conversation = {
      ...conv,
      functions: {
        ...conv.functions,
        record: {
          description: "Record a finding.",
          parameters: {
            type: "object",
            properties: {
              kind: { enum: ["fact", "estimate"] },
              tags: { type: "array", items: { type: "string", minLength: 2 }, minItems: 1 },
              where: { type: "object", properties: { page: { type: "number" }, sure: { type: "boolean" } } },
            },
          },
        },
      },
    };
    const session = await engine.openSession();
    try {
      for (const name of ["load_lora", "offload_lora", "record"]) {
        // 24 tokens (the case) hold less than the call's forced start on this character-level vocabulary
        const refused = await session.generate(record, { maxTokens: 24, steerToolCall: { name } }).then(
          (r) => ({ generated: r.tokens.generated, finish: r.finishReason, calls: r.calls.map((c) => c.name) }),
          (e: unknown) => e,
        );
        expect(refused).toBeInstanceOf(SteeredCallError);
        const need = Number(/raise max_tokens to (\d+)/.exec((refused as Error).message)![1]);
        await expect(session.generate(record, { maxTokens: need - 1, steerToolCall: { name } })).rejects.toThrow(
          SteeredCallError,
        );
        for (const [maxTokens, seed] of [
          [need, 1],
          [need + 40, 2],
        ] as const) {
          const r = await session.generate(record, { maxTokens, steerToolCall: { name }, seed, temperature: 0.8 });
          expect(r.tokens.generated).toBeLessThanOrEqual(maxTokens);
          expect(r.finishReason).toBe("tool_calls");
          expect(r.calls.map((c) => c.name)).toEqual([name]);
        }
      }
    } finally {
      await session.close();
    }
  });

  it("a steered call whose arguments need more than any context holds is refused at once, naming the keyword", async () => {
    // five levels of at least 512 items: bounding them item by item held the event loop for hours
    const nested = (levels: number): Record<string, unknown> =>
      levels ? { type: "array", minItems: 512, items: nested(levels - 1) } : { type: "integer" };
    const grid: Conversation = {
      ...conv,
      functions: {
        ...conv.functions,
        grid: { description: "Fill a grid.", parameters: { type: "object", properties: { cells: nested(5) } } },
      },
    };
    const session = await engine.openSession();
    try {
      const started = performance.now();
      const refused = await session.generate(grid, { maxTokens: 64, steerToolCall: { name: "grid" } }).catch((e) => e);
      expect(refused).toBeInstanceOf(SteeredCallError);
      expect((refused as Error).message).toMatch(/cannot fit in any context.*minItems/);
      expect(performance.now() - started).toBeLessThan(1_000);
    } finally {
      await session.close();
    }
  });

  it("steered into a tool call, the demo model emits a complete, parseable load_lora call", async () => {
    const session = await engine.openSession();
    try {
      const result = await session.generate(conv, {
        maxTokens: 120,
        steerToolCall: { name: "load_lora" },
        callable: ["load_lora"],
        seed: 3,
      });
      expect(result.finishReason).toBe("tool_calls");
      expect(result.calls).toHaveLength(1);
      expect(result.calls[0]!.name).toBe("load_lora");
      expect(["plan", "search", "write"]).toContain((result.calls[0]!.arguments as { adapter: string }).adapter);
      // without a name the grammar restricts the choice to the callable functions
      const free = await session.generate(conv, {
        maxTokens: 160,
        steerToolCall: {},
        callable: ["load_lora"],
        seed: 5,
      });
      expect(free.calls.map((c) => c.name)).toEqual(["load_lora"]);
    } finally {
      await session.close();
    }
  });
});
