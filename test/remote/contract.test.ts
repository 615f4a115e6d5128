import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LlamaChatCodec } from "../../src/llamaCpp/LlamaChatCodec.js";
import { scriptedTrajectory } from "../../testkit/scriptedTrajectory.js";
import { AdapterCapacityError, UnsupportedFeatureError } from "../../src/engine/index.js";
import { RemoteEngine, type FlavorName } from "../../src/engines/remote/index.js";
import { readGgufHeader, sha256File } from "../../src/gguf/index.js";
import {
  exportPeft,
  importPeft,
  parsePeftConfig,
  readGgufTensorData,
  SafetensorsFile,
} from "../../src/library/peft/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { demo, quietLogger } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";

/**
 * vLLM and SGLang cannot run here (no GPU): the backend's requests are checked against the documented request
 * shapes, and its handling of their documented answers (adapter load and unload, per-request selection, cached
 * tokens, an unknown adapter, a full adapter slot) against fixtures written from their APIs
 * (test/fixtures/remote/*.json, each naming its sources). A loopback server answers with those fixtures and
 * records what the backend sent.
 */

interface Fixture {
  requests: Record<string, Record<string, unknown>>;
  responses: Record<string, unknown>;
}
const fixture = (name: string) =>
  JSON.parse(readFileSync(join(PACKAGE_ROOT, "test", "fixtures", "remote", `${name}.json`), "utf8")) as Fixture;
const VLLM = fixture("vllm");
const SGLANG = fixture("sglang");

interface Recorded {
  route: string;
  body: Record<string, unknown>;
}
/** A JSON (or text) answer, or a server-sent event stream of `events` ending with [DONE]. */
type Reply = { status?: number; body?: unknown; events?: unknown[] };
type Handler = (body: Record<string, unknown>) => Reply;

/** The engine's HTTP API as the fixtures answer it; every request is recorded. */
class FixtureEngine {
  readonly requests: Recorded[] = [];
  private readonly routes = new Map<string, Handler[]>();
  private server!: Server;
  url = "";

  /**
   * Answers `route` ("POST /path") with `handler`; handlers given once (`next`) answer one request, in order, first.
   */
  on(route: string, handler: Handler): this {
    this.routes.set(route, [...(this.routes.get(route)?.filter((h) => (h as { once?: boolean }).once) ?? []), handler]);
    return this;
  }
  next(route: string, reply: Reply): this {
    const once: Handler & { once?: boolean } = () => reply;
    once.once = true;
    this.routes.set(route, [once, ...(this.routes.get(route) ?? [])]);
    return this;
  }
  sent(route: string): Record<string, unknown>[] {
    return this.requests.filter((r) => r.route === route).map((r) => r.body);
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      let data = "";
      req.on("data", (d: Buffer) => (data += d.toString()));
      req.on("end", () => {
        const route = `${req.method} ${req.url}`;
        const body = data ? (JSON.parse(data) as Record<string, unknown>) : {};
        this.requests.push({ route, body });
        const handlers = this.routes.get(route) ?? [];
        const handler = handlers[0];
        if (!handler) {
          res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ detail: "Not Found" }));
          return;
        }
        if ((handler as { once?: boolean }).once) this.routes.set(route, handlers.slice(1));
        const reply = handler(body);
        if (reply.events) {
          res.writeHead(200, { "content-type": "text/event-stream" });
          for (const event of reply.events) res.write(`data: ${JSON.stringify(event)}\n\n`);
          res.end("data: [DONE]\n\n");
          return;
        }
        const text = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body);
        res
          .writeHead(reply.status ?? 200, {
            "content-type": typeof reply.body === "string" ? "text/plain" : "application/json",
          })
          .end(text);
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const address = this.server.address() as { port: number };
    this.url = `http://127.0.0.1:${address.port}`;
    return this;
  }

  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** Every field of the documented request is in ours, with a value of the same JSON type. */
function expectDocumentedShape(ours: Record<string, unknown>, documented: Record<string, unknown>): void {
  const kind = (v: unknown) => (Array.isArray(v) ? "array" : v === null ? "null" : typeof v);
  for (const [key, example] of Object.entries(documented)) {
    expect(ours, `field ${key}`).toHaveProperty(key);
    expect(kind(ours[key]), `type of ${key}`).toBe(kind(example));
    if (kind(example) === "object")
      expectDocumentedShape(ours[key] as Record<string, unknown>, example as Record<string, unknown>);
  }
}

const ok = (body: unknown): Reply => ({ body });
const ENGINE_ADAPTER_DIR = "/srv/weact-adapters";
const conv = scriptedTrajectory(3);
let tokenizer: LlamaChatCodec;
beforeAll(async () => {
  tokenizer = await LlamaChatCodec.load({ modelPath: demo.model, logger: quietLogger() });
});
afterAll(async () => tokenizer?.dispose());

let fake: FixtureEngine;
let localDir: string;
const engines: RemoteEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.dispose();
  await fake?.stop();
});

async function connect(flavor: FlavorName): Promise<RemoteEngine> {
  localDir = tempDir("weact-peft-");
  const logger = quietLogger();
  const engine = await RemoteEngine.connect({
    url: fake.url,
    flavor,
    adapterDir: ENGINE_ADAPTER_DIR,
    localAdapterDir: localDir,
    timeoutMs: 5000,
    maxInFlight: 4,
    codec: await LlamaChatCodec.load({ modelPath: demo.model, logger }),
    logger,
  });
  engines.push(engine);
  return engine;
}

/** The PEFT folder an engine was told to load, as this server wrote it. */
const localFolder = (enginePath: string) => join(localDir, enginePath.slice(ENGINE_ADAPTER_DIR.length + 1));

/**
 * The PEFT form is the GGUF's adapter: importing it back gives the same tensors, and its config holds rank and alpha x
 * scale.
 */
async function expectPeftFormOf(folder: string, gguf: string, scale: number): Promise<void> {
  const config = parsePeftConfig(JSON.parse(readFileSync(join(folder, "adapter_config.json"), "utf8")), folder);
  const original = readGgufHeader(gguf);
  const alpha = original.metadata.get("adapter.lora.alpha") as number;
  expect(config.lora_alpha).toBeCloseTo(alpha * scale, 5);
  if (scale !== 1) return;
  const back = join(tempDir(), "back.gguf");
  await importPeft({ dir: folder, base: readGgufHeader(demo.model), alias: "back", outFile: back });
  const reread = readGgufHeader(back);
  for (const t of original.tensors)
    expect(readGgufTensorData(reread, t.name).equals(readGgufTensorData(original, t)), t.name).toBe(true);
}

describe("vLLM (fixtures of its OpenAI-compatible server)", () => {
  const start = async () => {
    fake = await new FixtureEngine().start();
    fake
      .on("GET /v1/models", () => ok(VLLM.responses.models))
      .on("POST /tokenize", (b) =>
        ok({ tokens: tokenizer.tokenize(b.prompt as string, true), count: 0, max_model_len: 8192 }),
      )
      .on("POST /v1/load_lora_adapter", () => ok(VLLM.responses.load_ok))
      .on("POST /v1/unload_lora_adapter", () => ok(VLLM.responses.unload_ok))
      .on("POST /v1/completions", (b) => {
        // a turn has the function-calling grammar; a distribution request has none (vLLM's log-probs would be the
        // grammar's)
        const grammar = (b.structured_outputs as { grammar: string } | undefined)?.grammar;
        return ok(
          grammar === undefined || grammar.includes("text-0") ? VLLM.responses.completion : VLLM.responses.prefill,
        );
      });
  };

  it("loads each version as a PEFT folder under its versioned name (alias, content hash, scale), a scaled copy for scale != 1", async () => {
    await start();
    const engine = await connect("vllm");
    expect(engine.model.name).toBe("Qwen/Qwen3-0.6B"); // the base, not the adapter vLLM also lists
    expect(engine.capacity.contextSize).toBe(8192);
    expectDocumentedShape(fake.sent("POST /tokenize")[0]!, VLLM.requests.tokenize!);
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    await engine.addAdapter({ alias: "search", filePath: demo.adapters.search!, scale: 0.5 });
    const all = fake.sent("POST /v1/load_lora_adapter");
    for (const load of all) expectDocumentedShape(load, VLLM.requests.load_lora_adapter!);
    // the base's stand-in (baseAsZeroAdapter): the first adapter scaled by 0, loaded once
    expect(all.map((l) => l.lora_name)).toEqual([
      expect.stringMatching(/^plan-[0-9a-f]{12}-s1$/),
      expect.stringMatching(/^base-[0-9a-f]{12}-s0$/),
      expect.stringMatching(/^search-[0-9a-f]{12}-s0\.5$/),
    ]);
    const standIn = JSON.parse(
      readFileSync(join(localFolder(all[1]!.lora_path as string), "adapter_config.json"), "utf8"),
    ) as { lora_alpha: number };
    expect(standIn.lora_alpha).toBe(0);
    const loads = [all[0]!, all[2]!];
    for (const load of loads) expect(load.lora_path).toBe(`${ENGINE_ADAPTER_DIR}/${load.lora_name as string}`);
    await expectPeftFormOf(localFolder(loads[0]!.lora_path as string), demo.adapters.plan!, 1);
    await expectPeftFormOf(localFolder(loads[1]!.lora_path as string), demo.adapters.search!, 0.5);
    // the scaled copy keeps the weights: only lora_alpha carries the scale
    const weightsOf = (folder: string) => readFileSync(join(folder, "adapter_model.safetensors"));
    const full = join(tempDir(), "full");
    await exportPeft({
      adapter: readGgufHeader(demo.adapters.search!),
      base: readGgufHeader(demo.model),
      outDir: full,
      scale: 1,
    });
    expect(weightsOf(localFolder(loads[1]!.lora_path as string)).equals(weightsOf(full))).toBe(true);
  });

  it("selects the adapter per request by its versioned name, sends token ids and the grammar, and reads calls, cached tokens and log-probs", async () => {
    await start();
    const engine = await connect("vllm");
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    const name = fake.sent("POST /v1/load_lora_adapter")[0]!.lora_name;
    const session = await engine.openSession();
    const report = await session.switchWeights("plan", conv);
    expect(report).toMatchObject({ to: "plan", strategy: "reuse", rebuild: { tokens: 299, reused: 0 } });
    const turn = await session.generate(conv, { maxTokens: 32, topLogprobs: 2 });
    const completions = fake.sent("POST /v1/completions");
    const sent = completions.find((b) => b.structured_outputs && b.max_tokens === 32)!;
    expectDocumentedShape(sent, VLLM.requests.completions!);
    // each generated token's log-probs again by teacher forcing, without a grammar: the model's own distribution
    const forced = completions.slice(completions.indexOf(sent) + 1);
    expect(forced.map((b) => [b.structured_outputs, (b.prompt as number[]).length])).toEqual(
      [0, 1, 2].map((i) => [undefined, engine.renderTokens(conv).length + i]),
    );
    expect(sent.model).toBe(name);
    expect(sent.prompt).toEqual(engine.renderTokens(conv));
    expect((sent.structured_outputs as { grammar: string }).grammar).toMatch(
      /^root ::= text-0\n[\s\S]*"load_lora" args-\d[\s\S]*"offload_lora" args-\d/,
    );
    expect(sent).toMatchObject({ logprobs: 2, return_tokens_as_token_ids: true });
    expect(turn.calls).toEqual([{ name: "load_lora", arguments: { adapter: "plan" }, raw: expect.anything() }]);
    expect(turn.text).toBe("Let me plan first.");
    expect(turn.finishReason).toBe("tool_calls");
    expect(turn.tokens).toMatchObject({ prompt: engine.renderTokens(conv).length, cached: 288, generated: 3 });
    expect(turn.logprobs?.[0]).toMatchObject({
      token: 76,
      logprob: -0.25,
      top: [
        { token: 76, logprob: -0.25 },
        { token: 83, logprob: -1.75 },
      ],
    });
    await session.close();
  });

  it("streams the response text as it comes, never a piece of the call, and reads the usage of the stream's end", async () => {
    await start();
    fake.on("POST /v1/completions", (b) =>
      b.stream ? { events: VLLM.responses.completion_stream as unknown[] } : ok(VLLM.responses.prefill),
    );
    const engine = await connect("vllm");
    const session = await engine.openSession();
    const pieces: string[] = [];
    const turn = await session.generate(conv, { maxTokens: 32, onText: (t) => pieces.push(t) });
    expect(fake.sent("POST /v1/completions").at(-1)).toMatchObject({
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(pieces.join("")).toBe("Let me plan first.");
    expect(pieces.length).toBeGreaterThan(1);
    expect(turn.calls.map((c) => c.name)).toEqual(["load_lora"]);
    expect(turn.tokens).toMatchObject({ cached: 296, generated: 6 });
    await session.close();
  });

  it("an engine that lost its adapters (a restart) gets them again and the request is repeated; a refreshed one is loaded anew and the old one unloaded once released", async () => {
    await start();
    const engine = await connect("vllm");
    await engine.addAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1 });
    const session = await engine.openSession({ adapter: "write" });
    fake.next("POST /v1/completions", { status: 404, body: VLLM.responses.model_missing });
    const turn = await session.generate(conv, { maxTokens: 8 });
    expect(turn.calls[0]?.name).toBe("load_lora");
    // write and the base's stand-in, then both again
    expect(fake.sent("POST /v1/load_lora_adapter")).toHaveLength(4);

    // a version another run loaded already is the same bytes under the same name: accepted
    fake.next("POST /v1/load_lora_adapter", { status: 400, body: VLLM.responses.load_already });
    const { previous, current } = await engine.refreshAdapter({
      alias: "write",
      filePath: demo.adapters["write-v2"]!,
      scale: 1,
    });
    const [oldName, , newName] = fake
      .sent("POST /v1/load_lora_adapter")
      .map((l) => l.lora_name as string)
      .filter((name) => name.startsWith("write-"));
    expect(newName).not.toBe(oldName);
    expect(current.sha256).not.toBe(previous.sha256);
    // the session still holds the old version: nothing unloaded until it lets go
    expect(fake.sent("POST /v1/unload_lora_adapter")).toEqual([]);
    await session.switchWeights(null, conv);
    await expect.poll(() => fake.sent("POST /v1/unload_lora_adapter")).toEqual([{ lora_name: oldName }]);
    expectDocumentedShape(fake.sent("POST /v1/unload_lora_adapter")[0]!, VLLM.requests.unload_lora_adapter!);
    await session.close();
  });

  it("keeps each session off every other's prefix cache: its own cache_salt on each of its requests, a new one after clearCache", async () => {
    await start();
    const engine = await connect("vllm");
    const [a, b] = [await engine.openSession(), await engine.openSession()];
    const saltsOf = async (session: typeof a) => {
      const from = fake.sent("POST /v1/completions").length;
      await session.generate(conv, { maxTokens: 8 });
      await session.generate(conv, { maxTokens: 8 });
      return fake
        .sent("POST /v1/completions")
        .slice(from)
        .map((r) => r.cache_salt);
    };
    const saltsA = await saltsOf(a);
    const saltsB = await saltsOf(b);
    expect(saltsA.length).toBeGreaterThanOrEqual(2);
    for (const salts of [saltsA, saltsB]) {
      expect(salts[0]).toMatch(/^[0-9a-f]{32}$/);
      expect(new Set(salts).size).toBe(1);
    }
    expect(saltsA[0]).not.toBe(saltsB[0]);
    await a.clearCache();
    const [after] = await saltsOf(a);
    expect(after).toMatch(/^[0-9a-f]{32}$/);
    expect(after).not.toBe(saltsA[0]);
    await a.close();
    await b.close();
  });

  it("unloads the adapters it loaded when it shuts down (each takes one of the engine's --max-loras slots)", async () => {
    await start();
    const engine = await connect("vllm");
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    await engine.addAdapter({ alias: "search", filePath: demo.adapters.search!, scale: 0.5 });
    const loaded = fake.sent("POST /v1/load_lora_adapter").map((l) => l.lora_name);
    expect(fake.sent("POST /v1/unload_lora_adapter")).toEqual([]);
    await engine.dispose();
    expect(
      fake
        .sent("POST /v1/unload_lora_adapter")
        .map((u) => u.lora_name)
        .sort(),
    ).toEqual([...loaded].sort());
  });

  it("refuses what vLLM cannot do with errors naming the flavor, the feature and the fix", async () => {
    await start();
    fake.on("POST /v1/load_lora_adapter", () => ({ status: 404, body: VLLM.responses.load_route_missing }));
    const engine = await connect("vllm");
    const refused = await engine
      .addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UnsupportedFeatureError);
    expect((refused as Error).message).toMatch(
      /vLLM at http:\/\/127\.0\.0\.1:\d+ does not support loading adapters at runtime here: start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True/,
    );
    const sets = await engine.openSession({ adapters: ["a", "b"] }).catch((e: unknown) => e);
    expect(sets).toBeInstanceOf(UnsupportedFeatureError);
    expect((sets as Error).message).toMatch(
      /vLLM at .* does not support several adapters applied together \(the static policy\)/,
    );
    await expect(
      RemoteEngine.connect({
        url: fake.url,
        flavor: "vllm",
        model: "llama-3",
        adapterDir: "/x",
        timeoutMs: 5000,
        maxInFlight: 1,
        codec: await LlamaChatCodec.load({ modelPath: demo.model, logger: quietLogger() }),
        logger: quietLogger(),
      }),
    ).rejects.toThrow(
      /serves no model "llama-3" \(it serves: Qwen\/Qwen3-0\.6B\); set engine\.remote\.model \(--engine-model\)/,
    );
  });
});

describe("SGLang (fixtures of its native API)", () => {
  const start = async () => {
    fake = await new FixtureEngine().start();
    fake
      .on("GET /v1/models", () => ok(SGLANG.responses.models))
      .on("POST /load_lora_adapter", () => ok(SGLANG.responses.load_ok))
      .on("POST /unload_lora_adapter", () => ok(SGLANG.responses.unload_ok))
      .on("POST /generate", (b) =>
        ok(
          (b.sampling_params as { max_new_tokens: number }).max_new_tokens === 0
            ? SGLANG.responses.prefill
            : SGLANG.responses.generate,
        ),
      );
  };

  it("loads versions under versioned names, selects them with lora_path, sends input_ids and the grammar as ebnf, and reads cached tokens", async () => {
    await start();
    const engine = await connect("sglang");
    await engine.addAdapter({ alias: "search", filePath: demo.adapters.search!, scale: 1 });
    const [load] = fake.sent("POST /load_lora_adapter");
    expectDocumentedShape(load!, SGLANG.requests.load_lora_adapter!);
    expect(load!.lora_name).toMatch(/^search-[0-9a-f]{12}-s1$/);
    await expectPeftFormOf(localFolder(load!.lora_path as string), demo.adapters.search!, 1);
    const session = await engine.openSession();
    const report = await session.switchWeights("search", conv);
    expect(report.rebuild).toMatchObject({ tokens: 299, reused: 0 });
    const turn = await session.generate(conv, { maxTokens: 16, topLogprobs: 2 });
    const sent = fake.sent("POST /generate").at(-1)!;
    expectDocumentedShape(sent, SGLANG.requests.generate!);
    expect(sent.lora_path).toBe(load!.lora_name);
    expect(sent.input_ids).toEqual(engine.renderTokens(conv));
    expect(sent).toMatchObject({ return_logprob: true, top_logprobs_num: 2 });
    expect(turn.calls).toEqual([{ name: "search", arguments: { query: "seine length" }, raw: expect.anything() }]);
    expect(turn.tokens).toMatchObject({ cached: 250, generated: 3 });
    expect(turn.logprobs?.[0]).toMatchObject({ token: 83, logprob: -0.5, top: [{ token: 83 }, { token: 84 }] });
    // the base is lora_path null
    await session.switchWeights(null, conv);
    expect(fake.sent("POST /generate").at(-1)!.lora_path).toBeNull();
    await session.close();
  });

  it("streams the response text from SGLang's cumulative chunks, never a piece of the call", async () => {
    await start();
    fake.on("POST /generate", (b) =>
      b.stream ? { events: SGLANG.responses.generate_stream as unknown[] } : ok(SGLANG.responses.prefill),
    );
    const engine = await connect("sglang");
    const session = await engine.openSession();
    const pieces: string[] = [];
    const turn = await session.generate(conv, { maxTokens: 32, onText: (t) => pieces.push(t) });
    expect(pieces.join("")).toBe("Searching now.");
    expect(turn.calls).toEqual([{ name: "search", arguments: { query: "seine length" }, raw: expect.anything() }]);
    expect(turn.tokens).toMatchObject({ cached: 250, generated: 3 });
    await session.close();
  });

  it("a full adapter slot is an adapter_capacity error; a lost adapter is loaded again and the request repeated", async () => {
    await start();
    const engine = await connect("sglang");
    fake.next("POST /load_lora_adapter", { status: 400, body: SGLANG.responses.load_full });
    const full = await engine
      .addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 })
      .catch((e: unknown) => e);
    expect(full).toBeInstanceOf(AdapterCapacityError);
    expect((full as Error).message).toMatch(
      /Maximum number of loaded LoRA adapters is 3.*unregister an adapter or raise the engine's adapter limit/,
    );
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    const session = await engine.openSession({ adapter: "plan" });
    fake.next("POST /generate", { status: 400, body: SGLANG.responses.lora_not_loaded });
    const turn = await session.generate(conv, { maxTokens: 8 });
    expect(turn.calls[0]?.name).toBe("search");
    expect(fake.sent("POST /load_lora_adapter")).toHaveLength(3);
    await session.close();
  });

  it("a manifest's PEFT folder is part of the version: other bytes in it are a new name, the same GGUF notwithstanding", async () => {
    await start();
    const engine = await connect("sglang");
    const given = join(tempDir(), "given");
    await exportPeft({
      adapter: readGgufHeader(demo.adapters.write!),
      base: readGgufHeader(demo.model),
      outDir: given,
      scale: 1,
    });
    const first = await engine.addAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1, peftDir: given });
    expect(first.peftSha256).toMatch(/^[0-9a-f]{64}$/);
    // the same GGUF, the folder's weights changed (a retrained export): a new version under a new name
    const weights = join(given, "adapter_model.safetensors");
    const bytes = readFileSync(weights);
    bytes[bytes.length - 1] ^= 0x01;
    writeFileSync(weights, bytes);
    const { previous, current } = await engine.refreshAdapter({
      alias: "write",
      filePath: demo.adapters.write!,
      scale: 1,
      peftDir: given,
    });
    expect(current.sha256).toBe(previous.sha256);
    expect(current.peftSha256).not.toBe(previous.peftSha256);
    expect(current.id).not.toBe(previous.id);
    const [oldName, newName] = fake.sent("POST /load_lora_adapter").map((l) => l.lora_name);
    expect(newName).not.toBe(oldName);
  });

  it("reads only the regular files of a manifest's PEFT folder: a symbolic link out of it or a FIFO is refused, naming the file", async () => {
    await start();
    const engine = await connect("sglang");
    const outside = join(tempDir(), "outside");
    await exportPeft({
      adapter: readGgufHeader(demo.adapters.write!),
      base: readGgufHeader(demo.model),
      outDir: outside,
      scale: 1,
    });
    const linked = join(tempDir(), "linked");
    mkdirSync(linked);
    copyFileSync(join(outside, "adapter_config.json"), join(linked, "adapter_config.json"));
    symlinkSync(join(outside, "adapter_model.safetensors"), join(linked, "adapter_model.safetensors"));
    await expect(
      engine.addAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1, peftDir: linked }),
    ).rejects.toThrow(/linked\/adapter_model\.safetensors.*is a symbolic link/);
    const fifo = join(tempDir(), "fifo");
    mkdirSync(fifo);
    copyFileSync(join(outside, "adapter_config.json"), join(fifo, "adapter_config.json"));
    execFileSync("mkfifo", [join(fifo, "adapter_model.safetensors")]);
    await expect(
      engine.addAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1, peftDir: fifo }),
    ).rejects.toThrow(/fifo\/adapter_model\.safetensors.*is not a regular file/);
    expect(fake.sent("POST /load_lora_adapter")).toEqual([]);
    expect(engine.adapters()).toEqual([]);
  });

  it("a manifest's own PEFT folder is placed as a scaled copy: the weights as they are, the scale in lora_alpha", async () => {
    await start();
    const engine = await connect("sglang");
    const given = join(tempDir(), "given");
    await exportPeft({
      adapter: readGgufHeader(demo.adapters.write!),
      base: readGgufHeader(demo.model),
      outDir: given,
      scale: 1,
    });
    await engine.addAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 2, peftDir: given });
    const [load] = fake.sent("POST /load_lora_adapter");
    expect(load!.lora_name).toMatch(/^write-[0-9a-f]{12}-s2$/);
    const placed = localFolder(load!.lora_path as string);
    await expectPeftFormOf(placed, demo.adapters.write!, 2);
    expect(
      readFileSync(join(placed, "adapter_model.safetensors")).equals(
        readFileSync(join(given, "adapter_model.safetensors")),
      ),
    ).toBe(true);
    expect(SafetensorsFile.open(join(placed, "adapter_model.safetensors")).header.tensors.length).toBeGreaterThan(0);
  });
});

describe("llama-server (its API as a loopback double: the backend's own request logic; test/remote/llama-server.test.ts proves it on the real server)", () => {
  interface Listed {
    id: number;
    path: string;
    scale: number;
  }
  /** What the double's server was started with, and what each slot holds (a host-memory cache keeps every prompt). */
  let listed: Listed[];
  let slots: Map<number, number[]>;
  let hostCache: boolean;
  const prefix = (a: readonly number[], b: readonly number[]) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
  };
  const completions = () => fake.sent("POST /completion");
  /** A request's adapters as "id:scale" for the active ones. */
  const active = (r: Record<string, unknown>) =>
    (r.lora as { id: number; scale: number }[]).filter((l) => l.scale !== 0).map((l) => `${l.id}:${l.scale}`);

  const start = async (files: string[]) => {
    listed = files.map((path, id) => ({ id, path, scale: 1 }));
    slots = new Map();
    hostCache = false;
    const all: number[][] = [];
    fake = await new FixtureEngine().start();
    fake
      .on("GET /props", () =>
        ok({ total_slots: 4, model_path: "demo.gguf", default_generation_settings: { n_ctx: 8192 } }),
      )
      .on("GET /v1/models", () => ok({ data: [{ id: "demo.gguf" }] }))
      .on("POST /tokenize", (b) => ok({ tokens: tokenizer.tokenize(b.content as string, true) }))
      // written by hand: JSON.stringify loses the sign of -0, the server's JSON keeps it
      .on("GET /lora-adapters", () =>
        ok(
          `[${listed.map((a) => `{"id":${a.id},"path":${JSON.stringify(a.path)},"scale":${Object.is(a.scale, -0) ? "-0.0" : a.scale}}`).join(",")}]`,
        ),
      )
      .on("POST /lora-adapters", (b) => {
        for (const { id, scale } of b as unknown as { id: number; scale: number }[])
          listed.find((a) => a.id === id)!.scale = scale;
        return ok({ success: true });
      })
      .on("POST /completion", (b) => {
        const prompt = b.prompt as number[];
        const slot = b.id_slot as number;
        const held = hostCache ? all : [slots.get(slot) ?? []];
        const cacheN = b.cache_prompt
          ? Math.min(Math.max(0, ...held.map((h) => prefix(h, prompt))), prompt.length - 1)
          : 0;
        slots.set(slot, prompt);
        all.push(prompt);
        const timings = { cache_n: cacheN, prompt_n: prompt.length - cacheN };
        if (b.n_predict === 0) return ok({ content: "", tokens: [], timings });
        const top = [{ id: 35, logprob: -0.1 }];
        return ok({
          content: "Done.",
          tokens: tokenizer.tokenize("Done.", false),
          tokens_predicted: 2,
          stop: true,
          stop_type: "eos",
          timings,
          completion_probabilities: [{ id: 35, logprob: -0.1, top_logprobs: top }],
        });
      });
  };
  const connectTo = async (adapterSha256?: Record<string, string>) => {
    const logger = quietLogger();
    const engine = await RemoteEngine.connect({
      url: fake.url,
      flavor: "llama-server",
      adapterSha256,
      timeoutMs: 5000,
      maxInFlight: 4,
      codec: await LlamaChatCodec.load({ modelPath: demo.model, logger }),
      logger,
    });
    engines.push(engine);
    return engine;
  };

  it("lets the engine continue from a slot's cache only where the session knows what it computed there under the same adapters", async () => {
    await start([demo.adapters.plan!, demo.adapters.search!]);
    const engine = await connectTo();
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    await engine.addAdapter({ alias: "search", filePath: demo.adapters.search!, scale: 0.5 });
    const session = await engine.openSession({ adapter: "plan" });
    let from = completions().length;
    const sent = () => completions().slice(from);
    await session.generate(conv, { maxTokens: 4 });
    // a new session: its slot may hold anything, so the prefill evaluates everything; the turn continues from it
    expect(sent().map((r) => [r.n_predict, r.cache_prompt, active(r)])).toEqual([
      [0, false, ["0:1"]],
      [4, true, ["0:1"]],
    ]);
    from = completions().length;
    await session.switchWeights("search", conv);
    await session.generate(conv, { maxTokens: 4 });
    // a switch's prefill never continues from the cache computed under plan
    expect(sent().map((r) => [r.n_predict, r.cache_prompt, active(r)])).toEqual([
      [0, false, ["1:0.5"]],
      [4, true, ["1:0.5"]],
    ]);
    // every request names every adapter (0 = off): none takes the server's global scales
    for (const r of completions()) expect((r.lora as unknown[]).length).toBe(2);
    from = completions().length;
    await session.clearCache();
    await session.generate(conv, { maxTokens: 4 });
    expect(sent().map((r) => r.cache_prompt)).toEqual([false, true]);
    const other = await engine.openSession({ adapter: "search" });
    from = completions().length;
    await other.generate(conv, { maxTokens: 4 });
    expect(sent()[0]).toMatchObject({ n_predict: 0, cache_prompt: false });
    expect(sent()[0]!.id_slot).not.toBe(completions().find((r) => r.n_predict === 4)!.id_slot);
    await session.close();
    await other.close();
  });

  it("maps versions to the server's adapters by content: a file under another name is found, one that changed is refused naming the flavor and the feature", async () => {
    const dir = tempDir();
    // what the server loaded: search's bytes under another name, and write-v2's bytes under plan's name
    copyFileSync(demo.adapters.search!, join(dir, "renamed.gguf"));
    copyFileSync(demo.adapters["write-v2"]!, join(dir, "plan.gguf"));
    await start([join(dir, "renamed.gguf"), join(dir, "plan.gguf"), "/srv/elsewhere/write.gguf"]);
    const engine = await connectTo({ "/srv/elsewhere/write.gguf": await sha256File(demo.adapters.write!) });
    await engine.addAdapter({ alias: "search", filePath: demo.adapters.search!, scale: 1 });
    await engine.addAdapter({ alias: "write", filePath: demo.adapters.write!, scale: 1 });
    const refused = await engine
      .addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UnsupportedFeatureError);
    expect((refused as Error).message).toMatch(
      /llama-server at http:\/\/127\.0\.0\.1:\d+ does not support an adapter file that changed after it started: it loaded .*plan\.gguf with other contents .*restart llama-server with --lora/,
    );
    const session = await engine.openSession({ adapter: "write" });
    await session.generate(conv, { maxTokens: 2 });
    expect(active(completions().at(-1)!)).toEqual(["2:1"]);
    // a refresh to bytes the server has maps to them, whatever the file is called there
    await engine.refreshAdapter({ alias: "write", filePath: demo.adapters["write-v2"]!, scale: 1 });
    await session.switchWeights("write", conv);
    expect(active(completions().at(-1)!)).toEqual(["1:1"]);
    // a refresh to bytes it does not have is refused, and the alias keeps its version
    const before = engine.adapters().find((a) => a.alias === "write")!;
    copyFileSync(demo.adapters.plan!, join(dir, "other.gguf"));
    await expect(
      engine.refreshAdapter({ alias: "write", filePath: join(dir, "other.gguf"), scale: 1 }),
    ).rejects.toThrow(
      /llama-server at .* does not support loading adapters at runtime: .*restart it with --lora .*other\.gguf/,
    );
    expect(engine.adapters().find((a) => a.alias === "write")!.id).toBe(before.id);
    await session.close();
  });

  it("refuses a server with a host-memory prompt cache (--cache-ram), which gives back states computed under other adapters", async () => {
    await start([demo.adapters.plan!]);
    hostCache = true;
    await expect(connectTo()).rejects.toThrow(
      /llama-server at .* does not support a host-memory prompt cache: .*restart llama-server with --cache-ram 0/,
    );
  });

  it("a server restarted with its --lora files in another order: the next request finds out, the adapters are mapped again by content, the turn repeated under the right ids", async () => {
    await start([demo.adapters.plan!, demo.adapters.search!]);
    const engine = await connectTo();
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    await engine.addAdapter({ alias: "search", filePath: demo.adapters.search!, scale: 1 });
    const session = await engine.openSession({ adapter: "plan" });
    await session.generate(conv, { maxTokens: 4 });
    expect(active(completions().at(-1)!)).toEqual(["0:1"]);
    // the restart: every slot empty, the files in reverse order, the global scales as --lora gives them
    listed = [demo.adapters.search!, demo.adapters.plan!].map((path, id) => ({ id, path, scale: 1 }));
    slots.clear();
    const from = completions().length;
    const turn = await session.generate(conv, { maxTokens: 4 });
    const after = completions().slice(from);
    expect(after.at(-1)).toMatchObject({ n_predict: 4, cache_prompt: false });
    expect(active(after.at(-1)!)).toEqual(["1:1"]);
    expect(turn.tokens.cached).toBe(0);
    // the server is marked again: the next turn continues from the cache
    await session.generate(conv, { maxTokens: 4 });
    expect(completions().at(-1)).toMatchObject({ cache_prompt: true });
    expect(active(completions().at(-1)!)).toEqual(["1:1"]);
    await session.close();
  });
});
