import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { MAIN } from "../../testkit/mcpClient.js";
import { tempDir } from "../helpers/files.js";
import { gemma, type GemmaSet } from "../helpers/gemma.js";
import { call, connectClient, testConfig, type Connected } from "../helpers/server.js";

// a real model on one CPU thread: a check evaluates about a thousand tokens twice (230 tokens/s)
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

const run = promisify(execFile);

/**
 * Gemma 3 270M served as a user's own model would be: fetched (cached once per machine), checked by `doctor` by its
 * name, and driven through MCP by a spawned server over stdio, the weight actions written by the model itself in the
 * call syntax the server prompts it with and parsed back.
 */
describe("Gemma 3 270M through the CLI and MCP", () => {
  let set: GemmaSet;
  let c: Connected;
  beforeAll(async () => {
    set = await gemma();
    const config = testConfig({
      model: { path: set.model, contextSize: 4096, sequencesPerContext: 2, maxContexts: 1 },
      adapters: { manifest: set.adapters.manifest },
      harness: { maxTokensPerTurn: 64, traceDir: join(tempDir(), "traces"), stage: { turns: 2 } },
    });
    c = await connectClient("stdio", undefined, {}, config);
  });
  afterAll(async () => c?.close());

  it("doctor finds the fetched model by its name and says which call syntax it is prompted with", async () => {
    const { stdout } = await run(process.execPath, [MAIN, "doctor", "gemma-3-270m", "--json"]);
    const verdict = JSON.parse(stdout) as { serves: boolean; checks: { check: string; ok: boolean; detail: string }[] };
    expect(verdict.serves).toBe(true);
    expect(verdict.checks.find((x) => x.check === "architecture")?.detail).toMatch(/^gemma3 /);
    expect(verdict.checks.find((x) => x.check === "chat wrapper")?.detail).toContain("||call: ");
  });

  it("the hard harness runs plan -> search -> write on it, each release and search written by the model and parsed", async () => {
    const steering = [
      { adapter: "plan", turn: 1, tool: "offload_lora" },
      { adapter: "search", turn: 1, tool: "search" },
      { adapter: "search", turn: 2, tool: "offload_lora" },
    ];
    const r = await call<{ stages: string[]; switches: number; generated_tokens: number; finish: string }>(
      c.client,
      "run_task",
      { task: "Which river flows through Paris?", policy: "hard", steering, seed: 1, budgets: { noToolTurns: 1 } },
      { timeout: 300_000 },
    );
    // the stages advance only on parsed calls: the plan's release, the search and its release, each the model's text
    expect(r.stages).toEqual(["plan", "search", "write"]);
    expect(r.switches).toBeGreaterThanOrEqual(3);
    expect(r.generated_tokens).toBeGreaterThan(0);
    // untrained (random) adapters on a pretrained base: the write stage may use its turn up without a final answer
    expect(["answer", "budget"]).toContain(r.finish);
  });
});
