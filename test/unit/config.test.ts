import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, LOOPBACK_ADAPTER_DIR, loadConfigFile, resolveConfig } from "../../src/config/loadConfig.js";
import { loadManifest, ManifestError, parseManifest } from "../../src/library/manifest.js";
import { DEFAULT_MANIFEST, TRAINED_MANIFEST, TRAINED_MODEL } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";

const dir = tempDir();
const entry = { alias: "plan", description: "Planning.", file: "plan.gguf" };

describe("adapter manifest", () => {
  it("the shipped manifest lists plan, search and write with files resolved beside it", () => {
    const entries = loadManifest(DEFAULT_MANIFEST);
    expect(entries.map((e) => e.alias)).toEqual(["plan", "search", "write"]);
    expect(entries[0]!.filePath).toBe(join(DEFAULT_MANIFEST, "..", "demo", "plan.gguf"));
    expect(entries[0]!.scale).toBe(1);
  });

  const invalid: [string, unknown, RegExp][] = [
    ["a bad alias", { adapters: [{ ...entry, alias: "Plan!" }] }, /adapters\.0\.alias: alias must be lowercase/],
    ["a missing description", { adapters: [{ alias: "plan", file: "p.gguf" }] }, /adapters\.0\.description/],
    [
      "an empty description",
      { adapters: [{ ...entry, description: "" }] },
      /adapters\.0\.description: describe the capability/,
    ],
    ["a negative scale", { adapters: [{ ...entry, scale: -1 }] }, /adapters\.0\.scale/],
    ["a duplicate alias", { adapters: [entry, entry] }, /adapters\.1\.alias: alias "plan" is listed twice/],
    ["an unknown field", { adapters: [{ ...entry, rank: 4 }] }, /adapters\.0: Unrecognized key/],
    ["a bad budget", { adapters: [{ ...entry, budget: { turns: 0 } }] }, /adapters\.0\.budget\.turns/],
    ["no adapters list", {}, /adapters/],
  ];
  for (const [name, raw, message] of invalid) {
    it(`rejects ${name}, naming the field`, () => {
      expect(() => parseManifest(raw, "m.json")).toThrow(ManifestError);
      expect(() => parseManifest(raw, "m.json")).toThrow(message);
    });
  }

  it("rejects a file that is not JSON", () => {
    const path = join(dir, "bad.json");
    writeFileSync(path, "{ nope");
    expect(() => loadManifest(path)).toThrow(/bad\.json is invalid: cannot read it as JSON/);
  });
});

describe("config", () => {
  it("defaults to the trained demo library, gpu auto", () => {
    const c = resolveConfig({}, "defaults", dir);
    expect(c.demo).toBe(true);
    expect(c.model.path).toBe(TRAINED_MODEL);
    expect(c.manifestPath).toBe(TRAINED_MANIFEST);
    expect(c.model.gpu).toBe("auto");
    expect(c.model.gpuLayers).toBe("auto");
    // the random model (engine tests, bench) keeps the generated library
    const random = resolveConfig({ model: { demo: "random" } }, "random", dir);
    expect(random.model.path).toBeUndefined();
    expect(random.manifestPath).toBe(DEFAULT_MANIFEST);
    expect(c.cache).toEqual({
      strategy: "reuse",
      spillMiB: 512,
      sharedPrefixes: true,
      background: true,
      backgroundDecodeMs: 50,
    });
  });

  it("resolves paths against the config file's folder", () => {
    const path = join(dir, "weact.json");
    writeFileSync(
      path,
      JSON.stringify({
        model: { path: "m.gguf", gpuLayers: 20 },
        adapters: { manifest: "lib/manifest.json" },
        cache: { spillDir: "kv" },
      }),
    );
    const c = loadConfigFile(path);
    expect(c.model.path).toBe(join(dir, "m.gguf"));
    expect(c.cache.spillDir).toBe(join(dir, "kv"));
    expect(c.manifestPath).toBe(join(dir, "lib", "manifest.json"));
    expect(c.demo).toBe(false);
  });

  it("names the field of a bad value", () => {
    expect(() => resolveConfig({ model: { gpu: "tpu" } }, "x.json", dir)).toThrow(ConfigError);
    expect(() => resolveConfig({ model: { gpu: "tpu" } }, "x.json", dir)).toThrow(/model\.gpu/);
    expect(() => resolveConfig({ model: { contextSize: 10 } }, "x.json", dir)).toThrow(/model\.contextSize/);
    expect(() => resolveConfig({ modle: {} }, "x.json", dir)).toThrow(/Unrecognized key/);
    expect(() => resolveConfig({ cache: { strategy: "lru" } }, "x.json", dir)).toThrow(/cache\.strategy/);
    expect(() => resolveConfig({ cache: { spillMiB: -1 } }, "x.json", dir)).toThrow(/cache\.spillMiB/);
  });
});

describe("engine.remote", () => {
  const remote = (r: Record<string, unknown>, backend = "remote") =>
    resolveConfig({ engine: { backend, remote: r } }, "weact.json", dir);
  it("resolves a llama-server and a vLLM with its adapter folder, against the config file's folder", () => {
    expect(remote({ url: "http://127.0.0.1:8080", flavor: "llama-server" }).engine.remote).toMatchObject({
      timeoutMs: 120_000,
      maxInFlight: 16,
    });
    expect(remote({ url: "http://gpu:8000", flavor: "vllm", adapterDir: "peft" }).engine.remote!.adapterDir).toBe(
      join(dir, "peft"),
    );
    // the engine's view of a folder mounted elsewhere stays as given
    expect(
      remote({ url: "http://gpu:8000", flavor: "sglang", adapterDir: "/srv/a", localAdapterDir: "mnt" }).engine.remote,
    ).toMatchObject({ adapterDir: "/srv/a", localAdapterDir: join(dir, "mnt") });
    // an engine on this machine reads this machine's files: a cache folder unless one is given
    expect(remote({ url: "http://127.0.0.1:8000", flavor: "vllm" }).engine.remote!.adapterDir).toBe(
      LOOPBACK_ADAPTER_DIR,
    );
  });

  const invalid: [string, () => unknown, RegExp][] = [
    [
      "a remote backend without engine.remote",
      () => resolveConfig({ engine: { backend: "remote" } }, "weact.json", dir),
      /engine\.remote: required when engine\.backend is "remote"/,
    ],
    [
      "an unknown flavor",
      () => remote({ url: "http://x:1", flavor: "tgi" }),
      /engine\.remote\.flavor: Invalid option: expected one of "llama-server"\|"vllm"\|"sglang"/,
    ],
    ["a URL that is none", () => remote({ url: "localhost", flavor: "vllm" }), /engine\.remote\.url/],
    [
      "credentials in the URL (they would show in errors and listings)",
      () => remote({ url: "http://user:secret@gpu:8000", flavor: "llama-server" }),
      /engine\.remote\.url: must not carry a user name or password .*engine\.remote\.apiKeyEnv/,
    ],
    [
      "an adapter hash that is none",
      () =>
        remote({ url: "http://127.0.0.1:8080", flavor: "llama-server", adapterSha256: { "/srv/plan.gguf": "abc" } }),
      /engine\.remote\.adapterSha256\.\/srv\/plan\.gguf: a sha256 in hex/,
    ],
    [
      "vLLM on another machine without an adapter folder",
      () => remote({ url: "http://gpu:8000", flavor: "vllm" }),
      /engine\.remote\.adapterDir: required for vllm off this machine, which loads PEFT folders/,
    ],
    [
      "an API key variable that is not set",
      () => remote({ url: "http://gpu:8000", flavor: "llama-server", apiKeyEnv: "WEACT_TEST_UNSET_KEY" }),
      /engine\.remote\.apiKeyEnv: the environment variable WEACT_TEST_UNSET_KEY is not set/,
    ],
  ];
  for (const [name, load, message] of invalid) {
    it(`rejects ${name}, naming the field`, () => {
      expect(load).toThrow(ConfigError);
      expect(load).toThrow(message);
    });
  }
});
