import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EngineLogger } from "../../src/engine/index.js";
import { LocalEngine } from "../../src/engines/local/index.js";
import { BINDING_BUILD_COMMAND, BindingUnavailableError } from "../../src/engines/local/testing.js";
import { demo, TEST_THREADS } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";

/** model.binding when this machine has no source build (an empty cache folder): the cheap half of the choice. */
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

describe("model.binding without a source build", () => {
  it('"source" refuses to start, naming the key and the command that builds it', async () => {
    const err = await LocalEngine.load({
      modelPath: demo.model,
      gpu: false,
      threads: TEST_THREADS,
      binding: "source",
      logger: recordingLogger(),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BindingUnavailableError);
    expect((err as Error).message).toMatch(/model\.binding is "source"/);
    expect((err as Error).message).toContain(BINDING_BUILD_COMMAND);
    expect((err as Error).message).toContain(process.env.WEACT_NODE_LLAMA_CPP_CACHE!);
  });

  it('"auto" serves on the prebuilt binding and says why', async () => {
    const logger = recordingLogger();
    const engine = await LocalEngine.load({
      modelPath: demo.model,
      gpu: false,
      threads: TEST_THREADS,
      binding: "auto",
      logger,
    });
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
