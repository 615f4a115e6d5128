import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { invocationStart, type ChatTurn, type Conversation } from "../../src/engine/index.js";
import { LocalEngine, type LocalEngineSession } from "../../src/engines/local/index.js";
import {
  MIN_DECODE_TOKENS,
  openInvocationOffByOneSession,
  PlainReference,
} from "../../src/engines/local/localTesting.js";
import { loadManifest } from "../../src/library/manifest.js";
import { exchangeMessage, LOAD_LORA, OFFLOAD_LORA, weightFunctions } from "../../src/library/weightActions.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { gemma } from "../helpers/gemma.js";
import { maxAbsDiff, quietLogger, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

// a real model on one CPU thread: each check evaluates a few hundred tokens twice
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

/**
 * The shipped activated LoRAs of Gemma 3 270M (models/gemma3-alora) served by the local engine, checked against the
 * replayed reference (a fresh context from the files, the base's weights before the invocation point and the
 * adapter's from it, the point found here by the test): base -> plan -> base -> search -> base, each switch through
 * the load and release exchanges the server renders; a history edited before the point (a result elided); and the
 * planted off-by-one point, which must fail.
 */
const TOLERANCE = 1e-4;
const ALORA_DIR = join(PACKAGE_ROOT, "models", "gemma3-alora");
const entries = loadManifest(join(ALORA_DIR, "manifest.json"));
const entry = (alias: string) => entries.find((e) => e.alias === alias)!;
const functions = weightFunctions(entries);

const load = (alias: string): ChatTurn => ({
  role: "assistant",
  text: "",
  calls: [{ name: LOAD_LORA, arguments: { adapter: alias }, result: exchangeMessage(entry(alias), LOAD_LORA, alias) }],
});
const release = (alias: string, handoff: string): ChatTurn => ({
  role: "assistant",
  text: "",
  calls: [{ name: OFFLOAD_LORA, arguments: { handoff }, result: exchangeMessage(entry(alias), OFFLOAD_LORA, alias) }],
});
const conversation = (...turns: ChatTurn[]): Conversation => ({
  functions,
  turns: [
    { role: "system", text: "You answer questions with the capabilities you load." },
    { role: "user", text: "Which river flows through Paris?" },
    ...turns,
  ],
});
const planned = [load("plan"), { role: "assistant" as const, text: "Goal: the river of Paris. Next: search." }];
const handedOver = [...planned, release("plan", "search for the river of Paris")];

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
  for (const alias of ["plan", "search"])
    await engine.addAdapter({ alias, filePath: join(ALORA_DIR, entry(alias).file), scale: 1 });
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
      alias ? [{ filePath: join(ALORA_DIR, entry(alias).file), scale: 1 }] : [],
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
