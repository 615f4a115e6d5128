import { readFileSync, writeFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mergeAdapters } from "../../src/library/merge/index.js";
import { tempLibrary, writeLoraVariant } from "../helpers/files.js";
import { call, callError, connectClient, testConfig, type Connected } from "../helpers/server.js";

/**
 * A static merge in a served library: llama.cpp loads the merged GGUF and `static:ties` runs on it alone; `static`
 * leaves it out (test/unit/static-merge-policies.test.ts has the rest of what the model is and is not offered).
 */
let c: Connected;
const LONG = { timeout: 300_000 };
const CAPABILITIES = ["plan", "search", "write"];

beforeAll(async () => {
  const lib = tempLibrary();
  // the demo's search adapter has rank 8, the others 4, and PEFT merges one rank: capabilities of rank 4 in their place
  CAPABILITIES.forEach((alias, i) => writeLoraVariant(lib.dir, alias, { seed: 30 + i }));
  await mergeAdapters({
    adapters: CAPABILITIES.map((alias) => ({ alias, file: lib.file(alias), scale: 1 })),
    settings: { method: "ties", weights: [1, 1, 1] },
    outFile: lib.file("static-ties"),
    name: "static-ties",
  });
  const manifest = JSON.parse(readFileSync(lib.manifest, "utf8")) as { adapters: object[] };
  manifest.adapters.push({
    alias: "static-ties",
    description: "Static ties merge of plan, search, write.",
    file: "static-ties.gguf",
    merge: { method: "ties", density: 0.2, weights: [1, 1, 1], of: CAPABILITIES },
  });
  writeFileSync(lib.manifest, JSON.stringify(manifest));
  c = await connectClient("stdio", undefined, {}, testConfig({ adapters: { manifest: lib.manifest } }));
});
afterAll(async () => c?.close());

async function trace(uri: string) {
  const text = ((await c.client.readResource({ uri })).contents[0] as { text: string }).text;
  return JSON.parse(text) as { type: string; [k: string]: unknown }[];
}

describe("a static merge in the library", () => {
  it("loads in llama.cpp beside the capabilities it merges", async () => {
    const listing = await call<{ adapters: { alias: string; resident: boolean; rank: number | null }[] }>(
      c.client,
      "list_adapters",
    );
    expect(listing.adapters.map((a) => [a.alias, a.resident])).toEqual([
      ...CAPABILITIES.map((a) => [a, true]),
      ["static-ties", true],
    ]);
    expect(listing.adapters.at(-1)!.rank).toBe(listing.adapters[0]!.rank);
  });

  it("static:ties runs the merged adapter alone for the whole run; static:linear without a linear merge is refused", async () => {
    const r = await call<{ trace_uri: string; stages: string[]; switches: number }>(
      c.client,
      "run_task",
      { task: "Which river flows through Paris?", policy: "static:ties", seed: 1, soft: { turns: 2 } },
      LONG,
    );
    expect(r.stages).toEqual(["static:ties"]);
    expect(r.switches).toBe(0);
    const events = await trace(r.trace_uri);
    expect(events.find((e) => e.type === "run_start")).toMatchObject({ fixedAdapters: ["static-ties"] });
    const turns = events.filter((e) => e.type === "model_call");
    expect(turns.length).toBeGreaterThan(0);
    for (const t of turns) expect(t.adapter).toBe("static-ties");

    expect(await callError(c.client, "run_task", { task: "t", policy: "static:linear" })).toContain(
      "the library has no linear merge of its adapters; make one with `weact-mcp merge --method linear --out FILE.gguf`",
    );
  });

  it("`static` still applies the capabilities together, without the merge", async () => {
    const r = await call<{ trace_uri: string }>(
      c.client,
      "run_task",
      { task: "Which river flows through Paris?", policy: "static", seed: 1, soft: { turns: 1 } },
      LONG,
    );
    const events = await trace(r.trace_uri);
    expect(events.find((e) => e.type === "run_start")).toMatchObject({ fixedAdapters: CAPABILITIES });
  });
});
