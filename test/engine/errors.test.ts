import { chmodSync, chownSync, mkdirSync, readdirSync, rmSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
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

/** This file's temporary folder, set before any module of the engine loads (one may read it once, at its import). */
const TMPDIR = await vi.hoisted(async () => {
  const [{ mkdtempSync }, { tmpdir }, { join }] = await Promise.all([
    import("node:fs"),
    import("node:os"),
    import("node:path"),
  ]);
  return (process.env.TMPDIR = mkdtempSync(join(tmpdir(), "weact-tmp-")));
});
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

describe("the folder a version is loaded through (a second version of a file another version holds)", () => {
  // the server's temporary folder (this file's own), as another local user of a shared machine could have prepared it
  const tmp = TMPDIR;
  const ownFolder = join(tmp, `weact-adapters-${process.getuid!()}`);
  /** The folders a server links in: its user's own, and the shared one (pid-counter names) of versions before. */
  const linkFolders = [join(tmp, "weact-adapters"), ownFolder];
  const twin = { alias: "plan-half", filePath: demo.adapters.plan!, scale: 0.5 };
  afterEach(async () => {
    if (engine.adapters().some((a) => a.alias === twin.alias)) await engine.removeAdapter(twin.alias);
    for (const folder of linkFolders) rmSync(folder, { recursive: true, force: true });
  });

  it("is refused when others may write it or it is a symbolic link, naming it; once removed, made private and used", async () => {
    const open = join(tmp, "open");
    mkdirSync(open);
    chmodSync(open, 0o777);
    for (const [prepare, reason] of [
      [(folder: string) => (mkdirSync(folder), chmodSync(folder, 0o777)), /is open to other users \(mode 777\)/],
      [(folder: string) => symlinkSync(open, folder), /is a symbolic link/],
      [
        (folder: string) => (mkdirSync(folder, { mode: 0o700 }), chownSync(folder, 65534, 65534)),
        /belongs to uid 65534/,
      ],
    ] as const) {
      if (reason.source.includes("uid") && process.getuid!() !== 0) continue; // only root can give a folder away
      for (const folder of linkFolders) prepare(folder);
      const err = await engine.addAdapter(twin).catch((e) => e);
      expect(err).toBeInstanceOf(AdapterFileError);
      expect(err.message).toContain(ownFolder);
      expect(err.message).toMatch(reason);
      expect(err.message).toMatch(/remove it/);
      expect(readdirSync(open)).toEqual([]);
      for (const folder of linkFolders) rmSync(folder, { recursive: true, force: true });
    }
    await expectEngineStillServes();
    await engine.addAdapter(twin);
    expect(statSync(ownFolder).mode & 0o777).toBe(0o700);
    expect(readdirSync(ownFolder)).toEqual([]);
  });

  it("a new server sweeps what an earlier one with its pid left, and a leftover it cannot remove does not stop it", async () => {
    // a restarted container's server often gets the pid of the one before: links that one left carry it too, and
    // its counter started at 1 as the new one's does
    const { sha256 } = engine.adapter("plan");
    const earlier = [...Array(4).keys()].map((i) => `${process.pid}-00000000-${i + 1}-${sha256}.gguf`);
    const earlierOld = [...Array(4).keys()].map((i) => `${process.pid}-${i + 1}-${sha256}.gguf`);
    // a leftover rm cannot remove without recursing, by its name a dead server's
    const stuck = [`4194305-1-${sha256}.gguf`, `4194305-00000000-1-${sha256}.gguf`];
    for (const folder of linkFolders) mkdirSync(folder, { mode: 0o700 });
    for (const name of earlier) symlinkSync(demo.adapters.search!, join(ownFolder, name));
    for (const name of earlierOld) symlinkSync(demo.adapters.search!, join(linkFolders[0]!, name));
    for (const [i, folder] of linkFolders.entries()) mkdirSync(join(folder, stuck[i]!));
    const restarted = await demoEngine({ adapters: ["plan"] });
    try {
      const info = await restarted.addAdapter(twin);
      expect(info.sha256).toBe(sha256);
      expect(readdirSync(ownFolder)).toEqual([stuck[1]]);
    } finally {
      await restarted.dispose();
    }
  });
});
