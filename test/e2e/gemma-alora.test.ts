import { copyFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ALORA_INVOCATION_KEY, readGgufHeader } from "../../src/gguf/index.js";
import { invocationStart } from "../../src/engine/index.js";
import { loadManifest } from "../../src/library/manifest.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";
import { gemma, hardRun } from "../helpers/gemma.js";
import { call, callError, connectClient, testConfig, type Connected } from "../helpers/server.js";

// a real model on one CPU thread
vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

const ALORA_DIR = join(PACKAGE_ROOT, "models", "gemma3-alora");
const training = JSON.parse(readFileSync(join(ALORA_DIR, "training.json"), "utf8")) as {
  invocations: Record<string, { text: string; tokens: number[] }>;
};
const invocationOf = (file: string) =>
  (readGgufHeader(join(ALORA_DIR, file)).metadata.get(ALORA_INVOCATION_KEY) as { items: number[] }).items;

interface Listing {
  adapters: { alias: string; sha256: string; invocation?: string }[];
}

/**
 * The shipped activated-LoRA library (models/gemma3-alora, trained by `npm run train:gemma -- --alora`) served by a
 * spawned server over stdio on Gemma 3 270M: each adapter's invocation is the one training recorded, the server
 * renders it in the load exchange token for token, registration refuses an aLoRA whose exchange lacks it, and a hard
 * run goes plan -> search -> write with the base's cache kept across every switch.
 */
describe("Gemma 3 270M with activated LoRAs through MCP", () => {
  let c: Connected;
  // a private copy of the library: the refusals below must not touch the shipped manifest
  const lib = tempDir();
  const traceDir = join(lib, "traces");
  beforeAll(async () => {
    await gemma();
    for (const file of ["manifest.json", "plan.gguf", "search.gguf", "write.gguf"])
      copyFileSync(join(ALORA_DIR, file), join(lib, file));
    const config = testConfig({
      model: { path: "gemma-3-270m", contextSize: 4096, sequencesPerContext: 2, maxContexts: 1 },
      adapters: { manifest: join(lib, "manifest.json") },
      harness: { maxTokensPerTurn: 64, traceDir, stage: { turns: 3 } },
    });
    c = await connectClient("stdio", undefined, {}, config);
  });
  afterAll(async () => c?.close());

  it("serves each adapter as an aLoRA on the invocation training recorded, rendered token for token in its load exchange", async () => {
    const { adapters } = await call<Listing>(c.client, "list_adapters");
    for (const alias of ["plan", "search", "write"]) {
      const recorded = training.invocations[alias]!;
      expect(invocationOf(`${alias}.gguf`)).toEqual(recorded.tokens);
      expect(adapters.find((a) => a.alias === alias)?.invocation).toBe(recorded.text);
    }
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", {
      task: "Which river flows through Paris?",
    });
    const before = (
      await call<{ prompt_tokens: number[] }>(c.client, "get_session", { session_id, include_prompt_tokens: true })
    ).prompt_tokens;
    await call(c.client, "load_lora", { session_id, adapter: "plan" });
    const after = (
      await call<{ prompt_tokens: number[] }>(c.client, "get_session", { session_id, include_prompt_tokens: true })
    ).prompt_tokens;
    // the server's prompt holds the trained sequence once, in the exchange the load added
    const start = invocationStart(after, training.invocations.plan!.tokens);
    expect(start).toBeGreaterThanOrEqual(before.length - 4);
    expect(invocationStart(before, training.invocations.plan!.tokens)).toBeUndefined();
    await call(c.client, "close_session", { session_id });
  });

  it("refuses an aLoRA whose load exchange lacks its invocation tokens, even where the text holds it; nothing changes", async () => {
    const before = await call<Listing>(c.client, "list_adapters");
    const manifestBefore = readFileSync(join(lib, "manifest.json"), "utf8");
    // the text holds "Planning capability active." but glued after ": " Gemma tokenizes " Planning", not "Planning"
    const glued = await callError(c.client, "refresh_adapter", {
      alias: "plan",
      activation: "Stage one: Planning capability active. Lay out the goals.",
    });
    expect(glued).toMatch(/invocation sequence "Planning capability active\." is not in its load exchange/);
    expect(glued).toMatch(/set the entry's "activation"/);
    expect(glued).toMatch(/\[adapter_invocation_missing\]/);
    // another capability's file under a new alias, with that alias's own text: refused at registration
    const foreign = await callError(c.client, "register_adapter", {
      alias: "search-again",
      file: "search.gguf",
      description: "Evidence search, again.",
      activation: "Writing capability active. Write the answer.",
    });
    expect(foreign).toMatch(/\[adapter_invocation_missing\]/);
    expect((await call<Listing>(c.client, "list_adapters")).adapters).toEqual(before.adapters);
    expect(readFileSync(join(lib, "manifest.json"), "utf8")).toBe(manifestBefore);
    // a text that starts with the sequence is accepted, and written back
    await call(c.client, "refresh_adapter", {
      alias: "plan",
      activation: "Planning capability active. Lay out the goals and the next actions, then release control.",
    });
    expect(loadManifest(join(lib, "manifest.json")).find((e) => e.alias === "plan")?.activation).toMatch(
      /^Planning capability active\. Lay out/,
    );
    await call(c.client, "refresh_adapter", {
      alias: "plan",
      activation: JSON.parse(manifestBefore).adapters.find((a: { alias: string }) => a.alias === "plan").activation,
    });
  });

  it("runs plan -> search -> write unsteered: each aLoRA releases itself, the answer is right, the base's cache kept across every switch", async () => {
    // two runs: the second starts from the shared prompt prefix the first saved, as every later session of a server does
    for (const id of ["unseen-1", "seen-1"]) {
      const { task, run: r, events } = await hardRun(c.client, join(ALORA_DIR, "eval-tasks.jsonl"), id, traceDir);
      expect(r.stages).toEqual(["plan", "search", "write"]);
      expect(r.answer).toBe(task.answer);
      // each stage loaded by the harness and released by the aLoRA's own learned exit call
      expect(
        events.filter((e) => e.type === "adapter_control").map((e) => `${String(e.action)}:${String(e.author)}`),
      ).toEqual(["load:harness", "offload:model", "load:harness", "offload:model", "load:harness", "offload:model"]);
      // each switch keeps more of the cache than the one before, and a load evaluates only its exchange and the decode
      // floor, never the history before its invocation point
      const rebuilds = events.filter((e) => e.type === "cache_rebuild");
      expect(rebuilds).toHaveLength(6);
      for (const [i, e] of rebuilds.entries()) {
        if (i === 0) continue;
        expect(e.reused as number, JSON.stringify(rebuilds)).toBeGreaterThan(rebuilds[i - 1]!.reused as number);
        if (e.adapter !== "base") expect(e.tokens as number, JSON.stringify(e)).toBeLessThan(128);
      }
    }
  });
});
