import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalEngine } from "../../src/engines/local/index.js";
import {
  AdapterFileError,
  AdapterIncompatibleError,
  DuplicateAdapterError,
  ModelFileError,
  UnknownAdapterError,
} from "../../src/engine/index.js";
import { QWEN3_0_6B_DIMS } from "../../src/demo/qwen3.js";
import { conversation, demo, demoEngine, quietLogger, TEST_THREADS } from "../helpers/engine.js";
import { patchedCopy, tempDir, truncatedCopy, writeLoraVariant, writeModelVariant } from "../helpers/files.js";

const dir = tempDir();
let engine: LocalEngine;

beforeAll(async () => {
  engine = await demoEngine({ adapters: ["plan"] });
});
afterAll(async () => engine?.dispose());

async function expectEngineStillServes() {
  const session = await engine.openSession();
  try {
    const result = await session.generate(conversation("still alive?"), { maxTokens: 2 });
    expect(result.tokens.generated).toBeGreaterThan(0);
  } finally {
    await session.close();
  }
}

describe("model file errors: refused with the file and the reason, before llama.cpp can abort the process", () => {
  const load = (modelPath: string) =>
    LocalEngine.load({ modelPath, gpu: false, threads: TEST_THREADS, logger: quietLogger() });

  it("missing file", async () => {
    const err = await load(`${dir}/nope.gguf`).catch((e) => e);
    expect(err).toBeInstanceOf(ModelFileError);
    expect(err.message).toContain("nope.gguf");
    expect(err.message).toMatch(/cannot open/);
  });

  it("truncated file", async () => {
    const err = await load(truncatedCopy(demo.model, dir, "half.gguf", 0.5)).catch((e) => e);
    expect(err).toBeInstanceOf(ModelFileError);
    expect(err.message).toMatch(/past the end of the file/);
  });

  it("wrong magic", async () => {
    const err = await load(patchedCopy(demo.model, dir, "magic.gguf", (b) => b.write("GGML", 0))).catch((e) => e);
    expect(err).toBeInstanceOf(ModelFileError);
    expect(err.message).toMatch(/wrong magic/);
  });

  it("metadata that would abort llama.cpp (no feed_forward_length, no head_count)", async () => {
    for (const key of ["qwen3.feed_forward_length", "qwen3.attention.head_count"]) {
      const path = writeModelVariant(dir, `no-${key}`, (m) => delete m[key]);
      const err = await load(path).catch((e) => e);
      expect(err).toBeInstanceOf(ModelFileError);
      expect(err.message).toContain(`${key} is missing`);
    }
  });

  it("an adapter file given as the model", async () => {
    const err = await load(demo.adapters.plan!).catch((e) => e);
    expect(err).toBeInstanceOf(ModelFileError);
    expect(err.message).toMatch(/adapter file, not a base model|missing/);
  });
});

describe("adapter errors: typed, naming the file, and the engine keeps serving", () => {
  it("missing adapter file", async () => {
    const err = await engine.addAdapter({ alias: "ghost", filePath: `${dir}/ghost.gguf`, scale: 1 }).catch((e) => e);
    expect(err).toBeInstanceOf(AdapterFileError);
    expect(err.message).toContain("ghost.gguf");
    await expectEngineStillServes();
  });

  it("adapter for another architecture", async () => {
    const err = await engine
      .addAdapter({
        alias: "llama",
        filePath: writeLoraVariant(dir, "llama-lora", { architecture: "llama" }),
        scale: 1,
      })
      .catch((e) => e);
    expect(err).toBeInstanceOf(AdapterIncompatibleError);
    expect(err.message).toMatch(/architecture is llama, the base model is qwen3/);
    await expectEngineStillServes();
  });

  it("adapter with tensor shapes of another model", async () => {
    const err = await engine
      .addAdapter({
        alias: "big",
        filePath: writeLoraVariant(dir, "big-lora", { dims: { ...QWEN3_0_6B_DIMS, nLayer: 2 } }),
        scale: 1,
      })
      .catch((e) => e);
    expect(err).toBeInstanceOf(AdapterIncompatibleError);
    expect(err.message).toMatch(
      /blk\.0\.attn_q\.weight: LoRA maps \[1024\] -> \[2048\] but the base weight is \[128,128\]/,
    );
    expect(err.mismatches.length).toBeLessThanOrEqual(6);
    await expectEngineStillServes();
  });

  it("truncated adapter file", async () => {
    const err = await engine
      .addAdapter({ alias: "cut", filePath: truncatedCopy(demo.adapters.write!, dir, "cut.gguf", 0.6), scale: 1 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(AdapterFileError);
    expect(err.message).toMatch(/cut\.gguf.*past the end/);
  });

  it("a base model given as an adapter", async () => {
    const err = await engine.addAdapter({ alias: "model", filePath: demo.model, scale: 1 }).catch((e) => e);
    expect(err).toBeInstanceOf(AdapterFileError);
    expect(err.message).toMatch(/general.type is "\(missing\)", expected "adapter"/);
  });

  it("duplicate alias", async () => {
    const err = await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 }).catch((e) => e);
    expect(err).toBeInstanceOf(DuplicateAdapterError);
  });

  it("unknown alias: the switch is refused and the session is unchanged", async () => {
    const session = await engine.openSession();
    try {
      const conv = conversation("unknown alias");
      await session.switchWeights("plan", conv);
      const before = await session.nextTokenLogProbs(conv);
      const err = await session.switchWeights("nonexistent", conv).catch((e) => e);
      expect(err).toBeInstanceOf(UnknownAdapterError);
      expect(err.message).toMatch(/unknown adapter "nonexistent"; the library has: plan/);
      expect(session.activeAdapter).toBe("plan");
      expect(await session.nextTokenLogProbs(conv)).toEqual(before);
    } finally {
      await session.close();
    }
  });
});
