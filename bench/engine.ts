import type { Conversation, Engine, EngineSession } from "../src/engine/index.js";
import { fmt, median } from "./stats.js";

// No functions: their documentation alone renders to ~600 tokens, longer than the shortest history measured.
const FUNCTIONS: Conversation["functions"] = {};

const FILLER = "The evidence gathered so far covers rivers, bridges and the history of the city. ";

/** A conversation whose rendered prompt is about `tokens` tokens long. */
export function conversationOf(engine: Engine, tokens: number): Conversation {
  const make = (repeats: number): Conversation => ({
    functions: FUNCTIONS,
    turns: [
      { role: "system", text: "You are a research agent." },
      { role: "user", text: FILLER.repeat(repeats) },
    ],
  });
  const perRepeat = engine.renderTokens(make(11)).length - engine.renderTokens(make(10)).length;
  const fixed = engine.renderTokens(make(0)).length;
  return make(Math.max(0, Math.round((tokens - fixed) / perRepeat)));
}

async function withSession<T>(
  engine: Engine,
  fn: (s: EngineSession) => Promise<T>,
  adapter: string | null = null,
  promptScope?: string,
): Promise<T> {
  const s = await engine.openSession({ adapter, ...(promptScope ? { promptScope } : {}) });
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

/** Switch call cost: the weight change itself, with no history to rebuild. */
export async function switchCallCost(engine: Engine, reps = 200) {
  const conv: Conversation = { functions: FUNCTIONS, turns: [{ role: "user", text: "hi" }] };
  return withSession(engine, async (s) => {
    const switchUs: number[] = [];
    const applyUs: number[] = [];
    for (let i = 0; i < reps; i++) {
      const r = await s.switchWeights(i % 2 ? null : "plan", conv);
      switchUs.push(r.switchMs * 1000);
      applyUs.push((r.switchMs + r.queueMs) * 1000);
    }
    return { switchUsP50: median(switchUs), withQueueUsP50: median(applyUs) };
  });
}

/**
 * A switch to an adapter with a history to evaluate vs a plain prefill of the same tokens under that adapter (the
 * physical minimum).
 */
export async function switchVsPrefill(engine: Engine, historyTokens: number, reps: number) {
  const conv = conversationOf(engine, historyTokens);
  const rebuild: number[] = [];
  const prefill: number[] = [];
  let tokens = 0;
  for (let i = -1; i < reps; i++) {
    await withSession(engine, async (s) => {
      await s.prefill(conv); // history cached under the base
      const r = await s.switchWeights("search", conv);
      if (i >= 0) rebuild.push(r.switchMs + r.rebuild.ms);
      tokens = r.rebuild.tokens;
    });
    await withSession(
      engine,
      async (s) => {
        await s.prefill(conv); // same warm-up as the rebuild's session had
        await s.clearCache();
        const p = await s.prefill(conv);
        if (i >= 0) prefill.push(p.ms);
      },
      "search",
    );
  }
  // the median of each pair's ratio: the two are measured back to back, so slow drifts of this shared VM cancel
  const ratios = rebuild.map((r, i) => r / prefill[i]!);
  return {
    historyTokens: tokens,
    switchMs: fmt(median(rebuild)),
    prefillMs: fmt(median(prefill)),
    ratio: fmt(median(ratios), 3),
  };
}

/** Two sessions generating in turns, on different adapters (adapter-set change per call) vs on the same one. */
export async function interleaving(engine: Engine, rounds: number, tokensPerTurn: number) {
  const run = async (a: string, b: string) => {
    const sessions = [await engine.openSession(), await engine.openSession()];
    const convs = [conversationOf(engine, 200), conversationOf(engine, 220)];
    try {
      await sessions[0]!.switchWeights(a, convs[0]!);
      await sessions[1]!.switchWeights(b, convs[1]!);
      const started = performance.now();
      let generated = 0;
      for (let r = 0; r < rounds; r++) {
        const results = await Promise.all(sessions.map((s, i) => s.generate(convs[i]!, { maxTokens: tokensPerTurn })));
        generated += results.reduce((n, x) => n + x.tokens.generated, 0);
      }
      return (performance.now() - started) / generated;
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
  };
  await run("plan", "search"); // warm-up
  const same: number[] = [];
  const differentRuns: number[] = [];
  for (let i = 0; i < 3; i++) {
    same.push(await run("plan", "plan"));
    differentRuns.push(await run("plan", "search"));
  }
  return {
    msPerTokenSame: fmt(median(same), 3),
    msPerTokenDifferent: fmt(median(differentRuns), 3),
    ratio: fmt(median(differentRuns) / median(same), 3),
  };
}

/**
 * A weight set's first cache in a new session, its prompt prefix (system prompt and function docs) evaluated
 * vs restored from the state a session of the same scope saved: the same conversation either way, so the
 * difference is the restore against the prefill it replaces (the cold run also saves the state once).
 */
export async function sharedPrefixVsPrefill(engine: Engine, conv: Conversation, reps: number) {
  const cold: number[] = [];
  const warm: number[] = [];
  let tokens = { prompt: 0, coldEvaluated: 0, warmEvaluated: 0 };
  for (let i = -1; i < reps; i++) {
    const scope = `bench-prefix-${i}`;
    const a = await withSession(engine, (s) => s.prefill(conv), null, scope);
    const b = await withSession(engine, (s) => s.prefill(conv), null, scope);
    if (i >= 0) {
      cold.push(a.ms);
      warm.push(b.ms);
    }
    tokens = { prompt: engine.renderTokens(conv).length, coldEvaluated: a.evaluated, warmEvaluated: b.evaluated };
  }
  const prefixes = engine.cacheStats().sharedPrefixes;
  return {
    promptTokens: tokens.prompt,
    restoredTokens: tokens.coldEvaluated - tokens.warmEvaluated,
    stateKiB: fmt(prefixes.entries ? prefixes.bytes / prefixes.entries / 1024 : 0, 0),
    prefillMs: fmt(median(cold)),
    fromSharedPrefixMs: fmt(median(warm)),
    ratio: fmt(median(warm.map((w, i) => w / cold[i]!)), 3),
  };
}
