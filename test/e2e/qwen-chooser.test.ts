import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { saveManifest } from "../../src/library/manifest.js";
import { SeededRandom } from "../../src/demo/random.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { testAdapterDir } from "../../testkit/realModelAdapters.js";
import { drawLibrary } from "../../training/qwen/capabilities.js";
import { CHOOSER_BACKBONE, TEST_STAGE, testLibraryEntries } from "../../training/qwen/library.js";
import { tempDir } from "../helpers/files.js";
import { quietLogger } from "../helpers/engine.js";
import { call, connectClient, testConfig, type Connected } from "../helpers/server.js";

// the first run on a machine makes the backbone: llama.cpp's merge tools built (minutes, once), then the merge
vi.setConfig({ testTimeout: 180_000, hookTimeout: 50 * 60_000 });

interface TraceEvent {
  type: string;
  action?: string;
  author?: string;
  ok?: boolean;
  active?: string;
}

/**
 * The taught backbone (Qwen2.5-Coder-0.5B-Instruct with the chooser LoRA merged in, made by fetch-model) served over
 * stdio with a library it never saw in training: held-out aliases and descriptions, in a drawn order, beside a
 * capability the task does not need. Under the soft policy, unsteered and greedy, the base opens its first load itself,
 * by a hermes call, under one of the aliases listed. Which capability it picks is check:chooser's measure (the decision
 * is right on about half the held-out histories), not this test's.
 */
describe("the taught Qwen backbone chooses its own weights", () => {
  let c: Connected;
  const library = drawLibrary(new SeededRandom(11), ["plan", "search", "write"], "held-out");
  beforeAll(async () => {
    const model = await fetchModel(CHOOSER_BACKBONE, { logger: quietLogger() });
    const dir = tempDir("weact-chooser-");
    const manifest = join(dir, "manifest.json");
    saveManifest(manifest, await testLibraryEntries(model, library));
    const config = testConfig({
      model: { path: model, chatTemplate: "jinja", contextSize: 4096, demo: undefined },
      adapters: { manifest, allowedDirs: [testAdapterDir(model)] },
      harness: { stage: TEST_STAGE, maxTokensPerTurn: 48 },
    });
    c = await connectClient("stdio", undefined, {}, config);
  });
  afterAll(async () => c?.close());

  it("opens a load itself, under an alias training never showed", async () => {
    const r = await call<{ trace_uri: string; stages: string[] }>(
      c.client,
      "run_task",
      { task: "Where was the composer of the Brandenburg Concertos born?", policy: "soft", soft: { turns: 1 } },
      { timeout: 170_000 },
    );
    const events = JSON.parse(
      ((await c.client.readResource({ uri: r.trace_uri })).contents[0] as { text: string }).text,
    ) as TraceEvent[];
    const loads = events.filter((e) => e.type === "adapter_control" && e.action === "load");
    expect(loads[0]).toMatchObject({ author: "model", ok: true });
    expect(library.map((l) => l.alias)).toContain(loads[0]!.active);
    expect(r.stages[0]).toBe(loads[0]!.active);
  });
});
