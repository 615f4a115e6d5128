import { copyFileSync, linkSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LocalEngine } from "../../src/engines/local/index.js";
import { writeGguf } from "../../src/gguf/index.js";
import { DEMO_DIMS, qwen3LoraFile } from "../../src/demo/qwen3.js";
import { demo, DEMO_BATCH_SPLIT_TOLERANCE, demoEngine, maxAbsDiff } from "../helpers/engine.js";
import { tempDir, tempLibrary, writeLoraVariant } from "../helpers/files.js";
import { call, callError, connectClient, testConfig, type Connected } from "../helpers/server.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

/** A private library folder: the manifest and copies of the demo adapters, so edits touch nothing shared. */
const { dir: lib, manifest } = tempLibrary();
// a large version of write (rank 512, ~20 MB) so freeing it shows in RSS
const bigWrite = qwen3LoraFile({ name: "write-big", dims: DEMO_DIMS, rank: 512, seed: 99, strength: 0.5 });
writeGguf(join(lib, "write-big.gguf"), bigWrite.metadata, bigWrite.tensors);

let c: Connected;
let reference: LocalEngine;
let listChanged = 0;
/**
 * The same weights, computed in a session's sequence (which other sessions used before it, its cells laid out by that
 * history; 5.4e-4 apart here) and in the reference's fresh context.
 */
const SAME_WEIGHTS = DEMO_BATCH_SPLIT_TOLERANCE;

interface Listing {
  adapters: { alias: string; sha256: string; resident: boolean }[];
  retired_versions: { alias: string; sha256: string }[];
  rss_bytes: number;
  base_model: { sha256: string };
}
const listing = () => call<Listing>(c.client, "list_adapters");
const loadEnum = async () => {
  const { tools } = await c.client.listTools();
  return (tools.find((t) => t.name === "load_lora")!.inputSchema.properties as Record<string, { enum: string[] }>)
    .adapter!.enum;
};
const promptTokens = async (session_id: string) =>
  (await call<{ prompt_tokens: number[] }>(c.client, "get_session", { session_id, include_prompt_tokens: true }))
    .prompt_tokens;
const firstLogprob = async (session_id: string) =>
  (
    await call<{ logprobs: { token: number; logprob: number }[] }>(c.client, "generate", {
      session_id,
      max_tokens: 2,
      top_logprobs: 1,
    })
  ).logprobs[0]!;

beforeAll(async () => {
  // the log-prob checks compare with a fresh context evaluating the prompt in one decode: no work ahead of time, no
  // shared prefixes (both split decodes differently; exact only against a replay of that split, see the kv-* tests)
  const config = testConfig({ adapters: { manifest }, cache: { background: false, sharedPrefixes: false } });
  [c, reference] = await Promise.all([
    connectClient("stdio", undefined, {}, config),
    demoEngine({ adapters: ["write"] }),
  ]);
  await reference.addAdapter({ alias: "write-big", filePath: join(lib, "write-big.gguf"), scale: 1 });
  c.client.setNotificationHandler(ToolListChangedNotificationSchema, () => void listChanged++);
});
afterAll(async () => {
  await c?.close();
  await reference?.dispose();
});

describe("adapter library on a running server", () => {
  it("inserts the code capability at runtime: validated, loaded, in load_lora's enum, announced to clients", async () => {
    expect(await loadEnum()).toEqual(["plan", "search", "write"]);
    const before = listChanged;
    const { registered } = await call<{ registered: { alias: string; rank: number } }>(c.client, "register_adapter", {
      alias: "code",
      file: "code.gguf",
      description: "Coding: write and run code to compute answers.",
    });
    expect(registered).toMatchObject({ alias: "code", rank: 4 });
    await expect.poll(() => listChanged).toBeGreaterThan(before);
    expect(await loadEnum()).toEqual(["plan", "search", "write", "code"]);
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", { task: "compute 6*7" });
    expect(await call(c.client, "load_lora", { session_id, adapter: "code" })).toMatchObject({
      active_adapter: "code",
    });
    // written back to the manifest, so it survives a restart
    expect(JSON.parse(readFileSync(manifest, "utf8")).adapters.map((a: { alias: string }) => a.alias)).toContain(
      "code",
    );
  });

  it("refreshes write without disturbing a session mid-stage; new loads get the new bytes; the old version is freed after", async () => {
    const before = await listing();
    const shaOf = (l: Listing, alias: string) => l.adapters.find((a) => a.alias === alias)!.sha256;
    const { session_id: running } = await call<{ session_id: string }>(c.client, "create_session", {
      task: "a session mid-trajectory",
    });
    await call(c.client, "load_lora", { session_id: running, adapter: "write" });

    const { current } = await call<{ current: { sha256: string } }>(c.client, "refresh_adapter", {
      alias: "write",
      file: "write-big.gguf",
    });
    const after = await listing();
    expect(current.sha256).not.toBe(shaOf(before, "write"));
    expect(shaOf(after, "plan")).toBe(shaOf(before, "plan"));
    expect(shaOf(after, "search")).toBe(shaOf(before, "search"));
    expect(after.base_model.sha256).toBe(before.base_model.sha256);
    expect(after.retired_versions).toEqual([{ alias: "write", sha256: shaOf(before, "write") }]);

    // the running session still computes with the old write
    const oldTokens = await promptTokens(running);
    const oldLp = await firstLogprob(running);
    const oldWant = await referenceNextTokenLogProbs(reference, "write", oldTokens);
    expect(Math.abs(oldLp.logprob - oldWant.get(oldLp.token)!)).toBeLessThanOrEqual(SAME_WEIGHTS);

    // a new load gets the new bytes, with a KV cache built under them (never the old one's)
    const { session_id: fresh } = await call<{ session_id: string }>(c.client, "create_session", {
      task: "a session after the refresh",
    });
    await call(c.client, "load_lora", { session_id: fresh, adapter: "write" });
    const newTokens = await promptTokens(fresh);
    const newLp = await firstLogprob(fresh);
    const newWant = await referenceNextTokenLogProbs(reference, "write-big", newTokens);
    expect(Math.abs(newLp.logprob - newWant.get(newLp.token)!)).toBeLessThanOrEqual(SAME_WEIGHTS);
    expect(maxAbsDiff(newWant, await referenceNextTokenLogProbs(reference, "write", newTokens))).toBeGreaterThan(0.1);

    // once the last user of the old version releases it, it is freed
    await call(c.client, "offload_lora", { session_id: running });
    await expect.poll(async () => (await listing()).retired_versions).toEqual([]);

    // and the big version's memory goes when it is replaced and released
    const rssBig = (await listing()).rss_bytes;
    await call(c.client, "refresh_adapter", { alias: "write", file: "write-v2.gguf" });
    await call(c.client, "offload_lora", { session_id: fresh });
    await expect.poll(async () => (await listing()).retired_versions).toEqual([]);
    const rssAfter = (await listing()).rss_bytes;
    // Whether freed pages go back to the OS is the allocator's call (measured standalone: 19 of the 20 MB return);
    // that the version is gone from memory is what retired_versions (the engine's resident set) shows.
    console.log(
      `RSS with the rank-512 write resident: ${(rssBig / 2 ** 20).toFixed(1)} MB; after freeing it: ${(rssAfter / 2 ** 20).toFixed(1)} MB`,
    );
    expect((await listing()).adapters.find((a) => a.alias === "write")!.sha256).not.toBe(current.sha256);
  });

  it("writes refresh_adapter and unregister_adapter back to the manifest, replacing the file whole", async () => {
    const entries = () =>
      (
        JSON.parse(readFileSync(manifest, "utf8")) as {
          adapters: { alias: string; file: string; description: string }[];
        }
      ).adapters;
    // a second name for the manifest as it is: an atomic save puts a new file in its place and leaves this one as it
    // was, where a write in place would change it under a reader
    const previous = join(lib, "manifest.previous.json");
    linkSync(manifest, previous);
    const written = readFileSync(previous, "utf8");
    writeLoraVariant(lib, "plan-v2", { seed: 23 });
    await call(c.client, "refresh_adapter", { alias: "plan", file: "plan-v2.gguf", description: "Planning, v2." });
    expect(entries().find((a) => a.alias === "plan")).toMatchObject({
      file: "plan-v2.gguf",
      description: "Planning, v2.",
    });
    expect(readFileSync(previous, "utf8")).toBe(written);
    rmSync(previous);

    linkSync(manifest, previous);
    const refreshed = readFileSync(previous, "utf8");
    await call(c.client, "unregister_adapter", { alias: "code" });
    expect(entries().map((a) => a.alias)).toEqual(["plan", "search", "write"]);
    expect(readFileSync(previous, "utf8")).toBe(refreshed);
    rmSync(previous);
  });

  it("refuses adapters for another architecture, with other shapes, or outside the adapter folders; the library stays intact", async () => {
    const before = await listing();
    writeLoraVariant(lib, "llama-arch", { architecture: "llama" });
    writeLoraVariant(lib, "wide", { dims: { ...DEMO_DIMS, nEmbd: 256 } });
    expect(
      await callError(c.client, "register_adapter", { alias: "llama", file: "llama-arch.gguf", description: "x" }),
    ).toMatch(/architecture is llama, the base model is qwen3/);
    expect(
      await callError(c.client, "register_adapter", { alias: "wide", file: "wide.gguf", description: "x" }),
    ).toMatch(/LoRA maps \[256\] -> \[128\] but the base weight is \[128,128\]/);
    const outside = writeLoraVariant(tempDir(), "elsewhere");
    expect(
      await callError(c.client, "register_adapter", { alias: "elsewhere", file: outside, description: "x" }),
    ).toMatch(/outside the adapter folders/);
    expect(
      await callError(c.client, "register_adapter", { alias: "sneaky", file: "../../etc/passwd", description: "x" }),
    ).toMatch(/outside the adapter folders/);
    expect(await callError(c.client, "unregister_adapter", { alias: "nope" })).toMatch(/no adapter "nope"/);
    // an activated LoRA naming ids outside the vocabulary: the engine's own refusal, never the tokenizer's abort
    writeLoraVariant(lib, "alora-outside", { invocationTokens: [1, 99_999_999] });
    expect(
      await callError(c.client, "register_adapter", {
        alias: "alora-outside",
        file: "alora-outside.gguf",
        description: "x",
      }),
    ).toMatch(/outside the base vocabulary/);
    // one whose load exchange lacks its invocation: it would apply nowhere
    copyFileSync(demo.adapters.verify!, join(lib, "alora-absent.gguf"));
    expect(
      await callError(c.client, "register_adapter", {
        alias: "alora-absent",
        file: "alora-absent.gguf",
        description: "x",
        // the demo's verify adapter is invoked by "VERIFY:", which this text lacks
        activation: "Verification active.",
      }),
    ).toMatch(/\[adapter_invocation_missing\]/);
    expect((await listing()).adapters).toEqual(before.adapters);
  });

  it("records the served base on register_adapter and refuses an adapter recorded for another base, however alike its shapes", async () => {
    const before = await listing();
    const served = before.base_model.sha256;
    const gemma = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
    writeLoraVariant(lib, "same-shape", { seed: 31 });
    const refused = await callError(c.client, "register_adapter", {
      alias: "same-shape",
      file: "same-shape.gguf",
      description: "x",
      baseSha256: gemma,
    });
    expect(refused).toContain(`made for the base model with SHA-256 ${gemma}`);
    expect(refused).toContain(`(SHA-256 ${served})`);
    expect(refused).toMatch(/import-peft.*\[adapter_base_mismatch\]$/);
    expect((await listing()).adapters).toEqual(before.adapters);
    expect(
      await callError(c.client, "register_adapter", {
        alias: "same-shape",
        file: "same-shape.gguf",
        description: "x",
        baseSha256: "not-a-hash",
      }),
    ).toMatch(/baseSha256.*64 lowercase hex digits/);

    await call(c.client, "register_adapter", { alias: "same-shape", file: "same-shape.gguf", description: "x" });
    const entry = () =>
      (
        JSON.parse(readFileSync(manifest, "utf8")) as { adapters: { alias: string; baseSha256?: string }[] }
      ).adapters.find((a) => a.alias === "same-shape");
    expect(entry()?.baseSha256).toBe(served);
    await call(c.client, "unregister_adapter", { alias: "same-shape" });
    expect(entry()).toBeUndefined();
  });

  it("applies manifest edits (a malformed edit is rejected and the running library kept)", async () => {
    const before = await listing();
    writeFileSync(manifest, "{ not json");
    // the watcher has read the edit and said so: only then does "unchanged" mean it was rejected
    await expect
      .poll(() => c.stderr(), { timeout: 5000 })
      .toMatch(/adapter manifest edit rejected; the running library is kept/);
    expect((await listing()).adapters).toEqual(before.adapters);
    const entries = before.adapters
      .filter((a) => a.alias !== "code")
      .map((a) => ({
        alias: a.alias,
        description: `the ${a.alias} capability`,
        file: `${a.alias === "write" ? "write-v2" : a.alias}.gguf`,
      }));
    writeFileSync(manifest, JSON.stringify({ adapters: entries }));
    await expect
      .poll(async () => (await listing()).adapters.map((a) => a.alias), { timeout: 5000 })
      .toEqual(["plan", "search", "write"]);
    expect(await loadEnum()).toEqual(["plan", "search", "write"]);
  });

  it("a manifest it cannot write keeps the change live and announced, and says it was not saved; one it cannot stat is a rejected edit", async () => {
    // a change the library saved: a reload first compares the manifest with its last write (the stat that can fail)
    await call(c.client, "refresh_adapter", { alias: "plan", description: "Planning." });
    const kept = readFileSync(manifest, "utf8");
    // as root no permission stops a write; a folder in the manifest's place does (a save cannot rename onto it)
    rmSync(manifest);
    mkdirSync(manifest);
    const before = listChanged;
    expect(
      await callError(c.client, "register_adapter", { alias: "code", file: "code.gguf", description: "Coding." }),
    ).toMatch(
      /the change is live but the manifest .* was not saved \(.+\), so a restart loses it; make adapters\.manifest writable/,
    );
    await expect.poll(() => listChanged).toBeGreaterThan(before);
    expect(await loadEnum()).toEqual(["plan", "search", "write", "code"]);

    // a manifest that is a symlink loop cannot even be stat'ed: the reload rejects it and the server goes on
    rmSync(manifest, { recursive: true });
    symlinkSync(manifest, manifest);
    await expect.poll(() => c.stderr(), { timeout: 5000 }).toMatch(/ELOOP[^\n]*adapter manifest edit rejected/);
    expect(await loadEnum()).toEqual(["plan", "search", "write", "code"]);
    rmSync(manifest);
    writeFileSync(manifest, kept);
    await expect.poll(loadEnum, { timeout: 5000 }).toEqual(["plan", "search", "write"]);
  });
});
