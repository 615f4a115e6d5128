import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { loadConfigFile } from "../../src/config/loadConfig.js";
import { judge } from "../../src/harness/answer.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { CHOOSER_BACKBONE, QWEN_LIBRARY_DIR } from "../../training/qwen/library.js";
import { quietLogger } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import { readTrace } from "../helpers/results.js";
import { call, connectClient, testConfig, type Connected } from "../helpers/server.js";

// the first run on a machine makes the backbone (qwen-chooser.test.ts does too); a soft run on one thread is about a
// minute
vi.setConfig({ testTimeout: 170_000, hookTimeout: 50 * 60_000 });

/** A held-out question (training/qwen/questions/held-out.jsonl) in everyday words, on a prose document. */
const QUESTION = { id: "h-what-1", task: "", answer: [] as string[] };

/**
 * The shipped Qwen capability library (models/qwen, `--library qwen`) over the taught backbone, served over stdio as
 * its config says (the backbone by name, its own Jinja template, the harness limits): one soft run, unsteered and
 * greedy, of a held-out question in everyday words. The backbone opens each capability itself, the adapters search
 * the default corpus, and the answer is the document's.
 */
describe("the Qwen capability library over MCP", () => {
  let c: Connected;
  beforeAll(async () => {
    const task = readFileSync(join(QWEN_LIBRARY_DIR, "eval-tasks.jsonl"), "utf8")
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l) as { id: string; task: string; answer: string[] })
      .find((t) => t.id === QUESTION.id)!;
    Object.assign(QUESTION, task);
    const model = await fetchModel(CHOOSER_BACKBONE, { logger: quietLogger() });
    // what --library qwen serves: its folder's config (test/unit/library-flag.test.ts: the name finds the folder)
    const library = loadConfigFile(join(QWEN_LIBRARY_DIR, "config.json"));
    expect(library.model.path).toBe(model);
    expect(library.model.chatTemplate).toBe("jinja");
    const config = testConfig({
      model: { path: model, chatTemplate: "jinja", contextSize: 4096, demo: undefined },
      adapters: { manifest: library.manifestPath },
      harness: { ...library.harness, traceDir: join(tempDir(), "traces") },
    });
    c = await connectClient("stdio", undefined, {}, config);
  });
  afterAll(async () => c?.close());

  it("answers a held-out question under soft, each capability opened by the backbone itself", async () => {
    const r = await call<{ answer: string; trace_uri: string; stages: string[] }>(
      c.client,
      "run_task",
      { task: QUESTION.task, policy: "soft" },
      { timeout: 160_000 },
    );
    expect(judge(r.answer, QUESTION.answer).exact, `${QUESTION.task} -> ${r.answer}`).toBe(true);
    expect(r.stages).toEqual(["plan", "search", "write"]);
    const events = await readTrace(c.client, r.trace_uri);
    const loads = events.filter((e) => e.type === "adapter_control" && e.action === "load");
    expect(loads.map((l) => [l.author, l.ok, l.active])).toEqual([
      ["model", true, "plan"],
      ["model", true, "search"],
      ["model", true, "write"],
    ]);
  });
});
