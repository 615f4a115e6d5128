import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, resolveConfig } from "../../src/config/loadConfig.js";
import { bundleHead, sourceBindingDir } from "../../src/llamaCpp/binding.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";

const dir = tempDir();
const script = join(PACKAGE_ROOT, "scripts", "node-llama-cpp-build.sh");
const bundle = join(PACKAGE_ROOT, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle");

describe("model.binding", () => {
  it("is prebuilt unless set, and takes prebuilt, source or auto", () => {
    expect(resolveConfig({}, "defaults", dir).model.binding).toBe("prebuilt");
    for (const binding of ["prebuilt", "source", "auto"] as const)
      expect(resolveConfig({ model: { binding } }, "x.json", dir).model.binding).toBe(binding);
  });

  it("rejects another value, naming the key", () => {
    expect(() => resolveConfig({ model: { binding: "native" } }, "x.json", dir)).toThrow(ConfigError);
    expect(() => resolveConfig({ model: { binding: "native" } }, "x.json", dir)).toThrow(/model\.binding/);
  });
});

describe("the source binding's cache folder", () => {
  it("is the folder scripts/node-llama-cpp-build.sh builds (the same key from the same version, commit, options and CPU)", () => {
    const env = { ...process.env, WEACT_NODE_LLAMA_CPP_CACHE: join(dir, "cache") };
    const fromScript = execFileSync("bash", [script, "--dir"], { env, encoding: "utf8" }).trim();
    expect(sourceBindingDir(env).dir).toBe(fromScript);
    expect(fromScript.startsWith(join(dir, "cache") + "/")).toBe(true);
  });

  it("follows XDG_CACHE_HOME like the script", () => {
    const env = { ...process.env, WEACT_NODE_LLAMA_CPP_CACHE: "", XDG_CACHE_HOME: join(dir, "xdg") };
    const fromScript = execFileSync("bash", [script, "--dir"], { env, encoding: "utf8" }).trim();
    expect(sourceBindingDir(env).dir).toBe(fromScript);
    expect(fromScript.startsWith(join(dir, "xdg", "weact-mcp", "node-llama-cpp") + "/")).toBe(true);
  });

  it("reads the bundle's commit as git does", () => {
    const heads = execFileSync("git", ["bundle", "list-heads", bundle], { encoding: "utf8" });
    const head = /^([0-9a-f]{40}) HEAD$/m.exec(heads)?.[1] ?? heads.split(" ")[0];
    expect(bundleHead(bundle)).toBe(head);
  });
});
