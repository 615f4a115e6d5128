import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EngineLogger } from "../../src/engine/index.js";
import { LocalEngine } from "../../src/engines/local/index.js";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BINDING_BUILD_COMMAND, BindingUnavailableError, sourceBindingDir } from "../../src/llamaCpp/binding.js";
import { demo, TEST_THREADS } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";

/**
 * model.binding when this machine has a broken source build, or none (an empty cache folder): the cheap half of the
 * choice (npm run check:binding loads a real build). In this order: one process loads one binding, and "auto" loads
 * the prebuilt one.
 */
const saved = process.env.WEACT_NODE_LLAMA_CPP_CACHE;
beforeAll(() => void (process.env.WEACT_NODE_LLAMA_CPP_CACHE = tempDir("weact-binding-")));
afterAll(() => {
  if (saved === undefined) delete process.env.WEACT_NODE_LLAMA_CPP_CACHE;
  else process.env.WEACT_NODE_LLAMA_CPP_CACHE = saved;
});

function recordingLogger(): EngineLogger & { lines: { level: string; obj: object; msg?: string }[] } {
  const lines: { level: string; obj: object; msg?: string }[] = [];
  const at = (level: string) => (obj: object, msg?: string) => void lines.push({ level, obj, msg });
  return { lines, debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

/** The demo engine on `binding`, logging into `logger`. */
const load = (binding: "source" | "auto", logger = recordingLogger()) =>
  LocalEngine.load({ modelPath: demo.model, gpu: false, threads: TEST_THREADS, binding, logger });

describe("model.binding with a build that does not load", () => {
  let dir: string;
  beforeAll(() => {
    dir = sourceBindingDir().dir;
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "llama-addon.node"), "not a shared object");
    writeFileSync(join(dir, "_nlcBuildMetadata.json"), "{}");
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('"source" refuses to start, saying why', async () => {
    const err = await load("source").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BindingUnavailableError);
    expect((err as Error).message).toMatch(/llama-addon\.node does not load/);
  });

  it('"auto" warns and serves on the prebuilt binding', async () => {
    const logger = recordingLogger();
    const engine = await load("auto", logger);
    try {
      expect(logger.lines.some((l) => l.level === "warn" && /does not load/.test(l.msg ?? ""))).toBe(true);
      expect(logger.lines.find((l) => l.msg === "llama.cpp runtime ready")?.obj).toMatchObject({ binding: "prebuilt" });
    } finally {
      await engine.dispose();
    }
  });
});

describe("model.binding without a source build", () => {
  it('"source" refuses to start, naming the key and the command that builds it', async () => {
    const err = await load("source").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BindingUnavailableError);
    expect((err as Error).message).toMatch(/model\.binding is "source"/);
    expect((err as Error).message).toContain(BINDING_BUILD_COMMAND);
    expect((err as Error).message).toContain(process.env.WEACT_NODE_LLAMA_CPP_CACHE!);
  });

  it('"auto" serves on the prebuilt binding and says why', async () => {
    const logger = recordingLogger();
    const engine = await load("auto", logger);
    try {
      const fallback = logger.lines.find((l) => l.level === "info" && /model\.binding "auto"/.test(l.msg ?? ""));
      expect(fallback?.msg).toContain(BINDING_BUILD_COMMAND);
      const ready = logger.lines.find((l) => l.msg === "llama.cpp runtime ready");
      expect(ready?.obj).toMatchObject({ binding: "prebuilt" });
    } finally {
      await engine.dispose();
    }
  });
});
