import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadLlama, type LoadLlamaOptions } from "../../src/llamaCpp/startLlama.js";
import { TEST_BINDING } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import { gemma } from "../helpers/gemma.js";
import { MAIN } from "../helpers/server.js";

/**
 * `doctor`'s KV figure against what llama.cpp allocates on the real Gemma 3 270M (15 of its 18 layers attend within a
 * 512-token window): the sizes llama.cpp logs when a context is created the way the engine creates it.
 */
interface Shape {
  contextSize: number;
  sequencesPerContext: number;
  maxContexts: number;
  batchSize: number;
  swaFullCache: boolean;
}
const SHAPES: Shape[] = [
  // the shipped defaults
  { contextSize: 8192, sequencesPerContext: 4, maxContexts: 2, batchSize: 512, swaFullCache: false },
  // sizes llama.cpp pads: 2100 tokens, 3 sequences, a window plus batch of 613 cells
  { contextSize: 2100, sequencesPerContext: 3, maxContexts: 1, batchSize: 100, swaFullCache: false },
  { contextSize: 2048, sequencesPerContext: 2, maxContexts: 1, batchSize: 512, swaFullCache: true },
];

let model: string;
type Llama = Awaited<ReturnType<typeof loadLlama>>["llama"];
let llama: Llama;
let loaded: Awaited<ReturnType<Llama["loadModel"]>>;
/** llama.cpp's log lines while a context is created. */
let log: string[] = [];
beforeAll(async () => {
  model = (await gemma()).model;
  ({ llama } = await loadLlama({
    binding: TEST_BINDING,
    gpu: false,
    maxThreads: 1,
    // node-llama-cpp's LlamaLogLevel.info (tests reach node-llama-cpp only through src/llamaCpp): the KV sizes are info
    logLevel: "info" as LoadLlamaOptions["logLevel"],
    logger: (_level, message) => log.push(message),
  }));
  loaded = await llama.loadModel({ modelPath: model });
}, 120_000);
afterAll(async () => {
  await loaded?.dispose();
  await llama?.dispose();
});

/** The KV MiB `weact-mcp doctor` estimates for a config of `shape`. */
async function doctorKvMiB(shape: Shape): Promise<{ mib: number; detail: string }> {
  const config = join(tempDir(), "weact.json");
  const { maxContexts, sequencesPerContext, contextSize, batchSize, swaFullCache } = shape;
  writeFileSync(
    config,
    JSON.stringify({ model: { contextSize, sequencesPerContext, maxContexts, batchSize, swaFullCache } }),
  );
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [MAIN, "doctor", model, "--config", config, "--json"],
    {
      env: { ...process.env, WEACT_LOG_LEVEL: "warn" },
    },
  );
  const verdict = JSON.parse(stdout) as { checks: { check: string; detail: string }[] };
  const detail = verdict.checks.find((c) => c.check === "memory estimate")!.detail;
  return { mib: Number(/KV (\d+(?:\.\d+)?)/.exec(detail)![1]), detail };
}

/** The KV MiB llama.cpp allocates for `shape`'s contexts, each created as the engine creates it (ContextMaker). */
async function allocatedKvMiB(shape: Shape): Promise<number> {
  log = [];
  const context = await loaded.createContext({
    contextSize: shape.contextSize,
    sequences: shape.sequencesPerContext,
    batchSize: shape.batchSize,
    threads: 1,
    swaFullCache: shape.swaFullCache,
  });
  await context.dispose();
  // "llama_kv_cache: size =   40.00 MiB (  1280 cells,  15 layers,  4/4 seqs), K (f16): ...": one line a cache
  const sizes = log.flatMap((line) => {
    const m = /llama_kv_cache: size = +(\d+(?:\.\d+)?) MiB/.exec(line);
    return m ? [Number(m[1])] : [];
  });
  expect(sizes.length).toBeGreaterThan(0);
  return sizes.reduce((a, b) => a + b, 0) * shape.maxContexts;
}

describe("doctor's memory estimate counts the KV cache llama.cpp allocates", () => {
  it.each(SHAPES.map((s) => [JSON.stringify(s), s] as const))("%s", async (_name, shape) => {
    const [estimate, allocated] = [await doctorKvMiB(shape), await allocatedKvMiB(shape)];
    console.log(`${_name}: doctor ${estimate.mib} MiB, llama.cpp ${allocated} MiB (${estimate.detail})`);
    expect(Math.abs(estimate.mib - allocated) / allocated).toBeLessThan(0.02);
  });
});
