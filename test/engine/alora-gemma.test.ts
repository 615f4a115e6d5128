import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { invocationStart, type ChatTurn, type Conversation } from "../../src/engine/index.js";
import { LocalEngine, type LocalEngineSession } from "../../src/engines/local/index.js";
import {
  MIN_DECODE_TOKENS,
  openInvocationOffByOneSession,
  PlainReference,
} from "../../src/engines/local/localTesting.js";
import { OFFLOAD_LORA } from "../../src/library/weightActions.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { aloraHistory, gemma } from "../helpers/gemma.js";
import { maxAbsDiff, quietLogger, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

// a real model on one CPU thread: each check evaluates a few hundred tokens twice
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * The shipped activated LoRAs of Gemma 3 270M (models/gemma3-alora) served by the local engine, checked against the
 * replayed reference (a fresh context from the files, the base's weights before the invocation point and the
 * adapter's from it, the point found here by the test): base -> plan -> base -> search -> base, each switch through
 * the load and release exchanges the server renders; a history edited before the point (a result elided); a lane
 * spilled while it holds both sides of the point (a mixed library: the session moved on to a standard LoRA), read
 * back and cut to the point on the return to the base; and the planted off-by-one point, which must fail.
 */
const TOLERANCE = 1e-4;
/** A standard LoRA beside the aLoRAs (a mixed library): switching to it leaves the aLoRA's lane idle, to be spilled. */
const LORA_FILE = join(PACKAGE_ROOT, "models", "gemma3", "write.gguf");
/** Gemma 3 270M's sliding window (15 of its 18 layers attend through it). */
const WINDOW = 512;
const { file, load, release, conversation, planned, handedOver } = aloraHistory();

let engine: LocalEngine;
let reference: PlainReference;
beforeAll(async () => {
  const { model } = await gemma();
  const options = {
    modelPath: model,
    gpu: false as const,
    threads: TEST_THREADS,
    binding: TEST_BINDING,
    contextSize: 2048,
    logger: quietLogger(),
  };
  engine = await LocalEngine.load({ ...options, sequencesPerContext: 2, maxContexts: 1, cache: { background: false } });
  for (const alias of ["plan", "search"]) await engine.addAdapter({ alias, filePath: file(alias), scale: 1 });
  await engine.addAdapter({ alias: "lora", filePath: LORA_FILE, scale: 1 });
  // as the engine keeps them by default (model.swaFullCache): a full and a window-sized SWA cache round differently
  reference = await PlainReference.load({ ...options, swaFullCache: true });
});
afterAll(async () => {
  await engine?.dispose();
  await reference?.dispose();
});

describe("the shipped Gemma 3 aLoRAs on the local engine", () => {
  /** The engine's next-token log-probs after `conv` against the reference replaying the session's cache. */
  const diff = async (session: LocalEngineSession, conv: Conversation, alias: string | null) => {
    const tokens = engine.renderTokens(conv);
    const invocation = alias ? engine.adapter(alias).invocationTokens! : undefined;
    const got = await session.nextTokenLogProbs(conv);
    const want = await reference.nextTokenLogProbs(
      alias ? [{ filePath: file(alias), scale: 1 }] : [],
      tokens,
      session.cacheReplay(),
      invocation ? invocationStart(tokens, invocation) : undefined,
    );
    return maxAbsDiff(want, got);
  };

  it("base -> plan -> base -> search -> base: each switch exact, evaluating from the invocation point on, never the history before it", async () => {
    const session = await engine.openSession();
    try {
      const start = conversation();
      await session.prefill(start);
      const history = engine.renderTokens(start).length;
      // base -> plan: the base's cache kept whole
      const toPlan = conversation(load("plan"));
      const planReport = await session.switchWeights("plan", toPlan);
      // the base's cache kept: at most the decode floor of it evaluated again, to make the append one efficient decode
      expect(planReport.rebuild.reused).toBeGreaterThanOrEqual(history - MIN_DECODE_TOKENS);
      expect(await diff(session, toPlan, "plan")).toBeLessThanOrEqual(TOLERANCE);
      const planned2 = conversation(...planned);
      expect(await diff(session, planned2, "plan")).toBeLessThanOrEqual(TOLERANCE);
      // plan -> base: only what the adapter computed (from its point) is evaluated again
      const back = conversation(...handedOver);
      const point = invocationStart(engine.renderTokens(back), engine.adapter("plan").invocationTokens!)!;
      const backReport = await session.switchWeights(null, back);
      expect(backReport.rebuild.reused).toBeGreaterThanOrEqual(point - MIN_DECODE_TOKENS);
      expect(await diff(session, back, null)).toBeLessThanOrEqual(TOLERANCE);
      // base -> search, a later point: everything before it is the base's
      const toSearch = conversation(...handedOver, load("search"));
      const searchReport = await session.switchWeights("search", toSearch);
      expect(searchReport.rebuild.reused).toBeGreaterThanOrEqual(engine.renderTokens(back).length - MIN_DECODE_TOKENS);
      expect(await diff(session, toSearch, "search")).toBeLessThanOrEqual(TOLERANCE);
      const done = conversation(...handedOver, load("search"), release("search", "the Seine"));
      await session.switchWeights(null, done);
      expect(await diff(session, done, null)).toBeLessThanOrEqual(TOLERANCE);
      console.log(
        "evaluated/reused by base->plan->base->search:",
        [planReport, backReport, searchReport].map((r) => `${r.rebuild.tokens}/${r.rebuild.reused}`).join(" "),
      );
    } finally {
      await session.close();
    }
  });

  it("a history edited before the invocation point (a result elided) is evaluated anew from the edit, and stays exact", async () => {
    const session = await engine.openSession();
    try {
      const first = conversation(...handedOver, load("search"));
      await session.switchWeights("search", first);
      expect(await diff(session, first, "search")).toBeLessThanOrEqual(TOLERANCE);
      // the plan's release result shortened, as the context window elides an old result: before search's point
      const elidedRelease: ChatTurn = {
        role: "assistant",
        text: "",
        calls: [{ name: OFFLOAD_LORA, arguments: { handoff: "search for the river of Paris" }, result: "[elided]" }],
      };
      const elided = conversation(...planned, elidedRelease, load("search"));
      expect(await diff(session, elided, "search")).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await session.close();
    }
  });

  it("a lane spilled across the invocation point is read back and cut to it on the return to the base, within the sliding window and beyond it", async () => {
    const a = await engine.openSession({ promptScope: "server" });
    let b: LocalEngineSession | undefined;
    // the plan stage's own tokens: a tool result of `words` words after the invocation point
    const staged = (words: number): ChatTurn[] => [
      ...planned,
      {
        role: "assistant",
        text: "",
        calls: [
          { name: "read", arguments: { id: "paris" }, result: "The Seine flows through Paris. ".repeat(words / 5) },
        ],
      },
      release("plan", "the Seine"),
    ];
    const spillAndReturn = async (words: number) => {
      const history = conversation(...staged(words));
      await a.switchWeights("plan", conversation(load("plan")));
      await a.prefill(conversation(...staged(words).slice(0, -1)));
      // to a standard LoRA: the lane that served the aLoRA (base tokens, then plan's from the point) is left idle...
      await a.switchWeights("lora", history);
      // ...and another session needs its sequence: it is spilled
      b = await engine.openSession({ promptScope: "server" });
      await b.prefill(conversation());
      expect(a.laneStates().find((l) => l.weights === "base")).toMatchObject({ state: "spilled" });
      const report = await a.switchWeights(null, history);
      const tokens = engine.renderTokens(history);
      const point = invocationStart(tokens, engine.adapter("plan").invocationTokens!)!;
      const d = await diff(a, history, null);
      await b.close();
      b = undefined;
      await a.switchWeights(null, conversation()); // back to the opening (a cut) for the next round
      return { report: report.rebuild, tokens: tokens.length, point, d };
    };
    try {
      await a.prefill(conversation());
      // the plan's tokens within the sliding window, then beyond it: either way the state read back is cut at the
      // point (a spilled lane keeps its whole cache), only what plan computed is evaluated again, and it is exact
      const runs = [await spillAndReturn(5), await spillAndReturn(400)];
      expect(runs[1]!.tokens - runs[1]!.point).toBeGreaterThan(WINDOW);
      for (const r of runs) {
        expect(r.report.restored).toBeGreaterThan(0);
        expect(r.report.reused).toBeGreaterThanOrEqual(r.point - MIN_DECODE_TOKENS);
        expect(r.report.tokens).toBeLessThanOrEqual(r.tokens - r.point + MIN_DECODE_TOKENS);
        expect(r.d).toBeLessThanOrEqual(TOLERANCE);
      }
      console.log(
        "spilled across the point, returned to the base (history/point: evaluated, reused, restored):",
        runs
          .map((r) => `${r.tokens}/${r.point}: ${r.report.tokens}, ${r.report.reused}, ${r.report.restored}`)
          .join("; "),
      );
    } finally {
      await a.close();
      await b?.close();
    }
  });

  it("the planted bug: an invocation point off by one does NOT match the reference on the real adapter", async () => {
    const planted = await openInvocationOffByOneSession(engine);
    try {
      const conv = conversation(load("plan"));
      await planted.prefill(conversation());
      await planted.switchWeights("plan", conv);
      const d = await diff(planted, conv, "plan");
      console.log(`planted bug (invocation point off by one) on the real plan aLoRA: max |delta log-prob| ${d}`);
      expect(d).toBeGreaterThan(1e-3);
    } finally {
      await planted.close();
    }
  });
});
