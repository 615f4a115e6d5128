import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { AdapterInfo, AdapterSpec, Engine } from "../../src/engine/index.js";
import { InvalidPolicyError, InvalidRunInputError } from "../../src/harness/errors.js";
import { checkRunInput, fixedAdapters, mergePolicies } from "../../src/harness/runInput.js";
import { PolicySchema } from "../../src/harness/types.js";
import { AdapterLibrary } from "../../src/library/AdapterLibrary.js";
import { parseManifest, type ManifestEntry } from "../../src/library/manifest.js";
import { createLogger } from "../../src/log.js";
import { modelNames } from "../../src/openai/models.js";
import { modelFunctions } from "../../src/sessions/modelFunctions.js";
import { LOAD_LORA } from "../../src/library/weightActions.js";
import { tempDir } from "../helpers/files.js";

const entry = (alias: string, merge?: ManifestEntry["merge"]) => ({
  alias,
  description: `the ${alias} adapter`,
  file: `${alias}.gguf`,
  ...(merge ? { merge } : {}),
});
const merge = (method: "linear" | "ties" | "dare-ties") => ({
  method,
  weights: [1, 1, 1],
  of: ["plan", "search", "write"],
});

/** A library over an engine that loads every adapter but those in `broken` (no model: these tests choose weights). */
async function library(entries: Record<string, unknown>[], broken: readonly string[] = []): Promise<AdapterLibrary> {
  const dir = tempDir();
  const engine = {
    addAdapter: async (spec: AdapterSpec) => {
      if (broken.includes(spec.alias)) throw new Error("not a GGUF file");
      return { alias: spec.alias, id: `${spec.alias}@0`, filePath: spec.filePath, scale: spec.scale } as AdapterInfo;
    },
    residentVersions: () => [],
    // these files are no activated LoRAs: the library reads no invocation from them
    features: { alora: false },
  } as unknown as Engine;
  // the library opens each file (it loads its own copy): one that begins as a GGUF does
  for (const e of entries) writeFileSync(join(dir, String(e.file)), "GGUF");
  const manifest = join(dir, "manifest.json");
  return AdapterLibrary.load(engine, parseManifest({ adapters: entries }, manifest), createLogger("silent"), {
    manifestPath: manifest,
    allowedDirs: [dir],
  });
}

const capabilities = () => ["plan", "search", "write"].map((a) => entry(a));

describe("static merges as policies", () => {
  it("static:<method> runs the library's first loaded merge by that method, in manifest order", async () => {
    const lib = await library(
      [
        ...capabilities(),
        entry("ties-broken", merge("ties")),
        entry("ties-a", merge("ties")),
        entry("ties-b", merge("ties")),
        entry("dare", merge("dare-ties")),
      ],
      ["ties-broken"],
    );
    expect(fixedAdapters("static:ties", lib)).toEqual(["ties-a"]);
    expect(fixedAdapters("static:dare-ties", lib)).toEqual(["dare"]);
    expect(mergePolicies(lib)).toEqual(["static:ties", "static:dare-ties"]);
    // a merge is also one adapter of the library
    expect(fixedAdapters("single:ties-a", lib)).toEqual(["ties-a"]);
  });

  it("static:<method> without such a merge says how to make one; with only a broken one, why it did not load", async () => {
    const lib = await library([...capabilities(), entry("ties", merge("ties"))], ["ties"]);
    expect(() => fixedAdapters("static:linear", lib)).toThrow(InvalidPolicyError);
    expect(() => fixedAdapters("static:linear", lib)).toThrow(
      "policy: the library has no linear merge of its adapters; make one with `weact-mcp merge --method linear --out FILE.gguf`",
    );
    expect(() => fixedAdapters("static:ties", lib)).toThrow(
      'policy: the library\'s ties merge "ties" did not load (not a GGUF file)',
    );
    expect(mergePolicies(lib)).toEqual([]);
  });

  it("a merge is not offered to the model: not in load_lora, not in `static`'s set, not a workflow stage", async () => {
    const lib = await library([...capabilities(), entry("static-ties", merge("ties"))]);
    const loadLora = modelFunctions(lib, {})[LOAD_LORA]!;
    expect(loadLora.parameters).toMatchObject({ properties: { adapter: { enum: ["plan", "search", "write"] } } });
    expect(loadLora.description).not.toContain("static-ties");
    expect(fixedAdapters("static", lib)).toEqual(["plan", "search", "write"]);
    expect(() => checkRunInput({ task: "t", policy: "hard", workflow: ["plan", "static-ties"] }, lib, [])).toThrow(
      InvalidRunInputError,
    );
    expect(() => checkRunInput({ task: "t", policy: "hard" }, lib, ["static-ties", "write"])).toThrow(
      'harness.workflow[0]: "static-ties" is a static merge of plan, search, write, not a capability a stage loads (policy static:ties runs it); the capabilities are plan, search, write',
    );
  });

  it("a hard run's prompt lists its workflow's capabilities only, in library order, with their descriptions", async () => {
    const lib = await library(capabilities());
    const loadLora = modelFunctions(lib, {}, ["write", "plan"])[LOAD_LORA]!;
    expect(loadLora.parameters).toMatchObject({ properties: { adapter: { enum: ["plan", "write"] } } });
    expect(loadLora.description).toMatch(/- plan: .*\n- write: /);
    expect(loadLora.description).not.toMatch(/- search: /);
    expect(modelFunctions(lib, {})[LOAD_LORA]!.parameters).toMatchObject({
      properties: { adapter: { enum: ["plan", "search", "write"] } },
    });
  });

  it("the OpenAI door lists a static:<method> model per loaded merge, and the policy schema takes the three", async () => {
    const lib = await library([...capabilities(), entry("static-ties", merge("ties"))]);
    expect(modelNames(lib)).toEqual([
      "weact-soft",
      "weact-hard",
      "base",
      "static",
      "static:ties",
      "single:plan",
      "single:search",
      "single:write",
      "single:static-ties",
    ]);
    for (const p of ["static:linear", "static:ties", "static:dare-ties"]) expect(PolicySchema.parse(p)).toBe(p);
    expect(PolicySchema.safeParse("static:svd").success).toBe(false);
  });

  it("the manifest checks a merge record: one weight per adapter, a density only for ties and dare-ties", () => {
    const parse = (m: Record<string, unknown>) => () =>
      parseManifest({ adapters: [entry("m", m as never)] }, "/m.json");
    expect(parse({ method: "ties", density: 0.2, weights: [1, 1], of: ["plan", "search"] })).not.toThrow();
    expect(parse({ method: "ties", weights: [1], of: ["plan", "search"] })).toThrow(
      "adapters.0.merge.weights: one weight per merged adapter: 1 for 2",
    );
    expect(parse({ method: "linear", density: 0.5, weights: [1, 1], of: ["plan", "search"] })).toThrow(
      "adapters.0.merge.density: linear prunes nothing",
    );
    expect(parse({ method: "ties", seed: 3, weights: [1, 1], of: ["plan", "search"] })).toThrow(
      "adapters.0.merge.seed: only dare-ties draws at random",
    );
    expect(parse({ method: "ties", weights: [1, 1], of: ["plan", "search"], extra: 1 })).toThrow(/merge/);
  });
});
