import { execFile } from "node:child_process";
import { closeSync, openSync, ftruncateSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, loadConfigFile } from "../../src/config/loadConfig.js";
import { MODELS } from "../../src/modelFiles/index.js";
import { markVerified } from "../../src/modelFiles/verify.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { MAIN } from "../helpers/server.js";

const run = promisify(execFile);
const GEMMA_CONFIG = join(PACKAGE_ROOT, "models", "gemma3", "config.json");

describe("--library and a config's model.path by name", () => {
  const saved = process.env.WEACT_MODEL_CACHE;
  afterEach(() => {
    if (saved === undefined) delete process.env.WEACT_MODEL_CACHE;
    else process.env.WEACT_MODEL_CACHE = saved;
  });

  it("a config naming a known model not fetched yet says how to fetch it; once fetched, it is the cached file", () => {
    const cache = mkdtempSync(join(tmpdir(), "weact-library-"));
    process.env.WEACT_MODEL_CACHE = cache;
    const refused = (() => {
      try {
        return loadConfigFile(GEMMA_CONFIG);
      } catch (err) {
        return err;
      }
    })() as ConfigError;
    expect(refused).toBeInstanceOf(ConfigError);
    expect(refused.message).toMatch(
      /model\.path: model gemma-3-270m is not fetched yet .*weact-mcp fetch-model gemma-3-270m/,
    );
    // a file of the pinned size under fetch-model's marker (the marker stands for the hash; no bytes are read)
    const spec = MODELS["gemma-3-270m"]!;
    const file = join(cache, spec.fileName);
    const fd = openSync(file, "w");
    ftruncateSync(fd, spec.size);
    closeSync(fd);
    markVerified(file, spec);
    const config = loadConfigFile(GEMMA_CONFIG);
    expect(config.model.path).toBe(file);
    expect(config.manifestPath).toBe(join(PACKAGE_ROOT, "models", "gemma3", "manifest.json"));
  });

  it("--library takes a shipped library or a folder with a config.json; anything else is refused, naming the shipped ones", async () => {
    const err = (await run(process.execPath, [MAIN, "--library", "gemma4"]).catch((e: unknown) => e)) as {
      code: number;
      stderr: string;
    };
    expect(err.code).toBe(2);
    expect(err.stderr).toMatch(
      /--library: "gemma4" is neither a shipped library \(gemma3, gemma3-alora, qwen, trained\) nor a folder/,
    );
  });

  it("--config and --library together are refused before anything loads", async () => {
    const err = (await run(process.execPath, [MAIN, "--library", "gemma3", "--config", GEMMA_CONFIG]).catch(
      (e: unknown) => e,
    )) as { code: number; stderr: string };
    expect(err.code).toBe(2);
    expect(err.stderr).toContain("--config and --library both name a config file: give one");
  });
});
