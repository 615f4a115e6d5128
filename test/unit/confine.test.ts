import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { isInsideDirs } from "../../src/library/confine.js";
import { tempDir } from "../helpers/files.js";

describe("path confinement of adapter files", () => {
  const root = tempDir("weact-confine-");
  const lib = join(root, "lib");
  const other = join(root, "other");
  mkdirSync(join(lib, "nested"), { recursive: true });
  mkdirSync(other);
  writeFileSync(join(lib, "a.gguf"), "x");
  writeFileSync(join(lib, "nested", "b.gguf"), "x");
  writeFileSync(join(other, "c.gguf"), "x");
  symlinkSync(join(other, "c.gguf"), join(lib, "escape.gguf"));
  symlinkSync(lib, join(root, "lib-link"));
  mkdirSync(join(root, "library"));
  writeFileSync(join(root, "library", "d.gguf"), "x");

  it("accepts files in a folder or below it, existing or not, and the folder itself", () => {
    expect(isInsideDirs(join(lib, "a.gguf"), [lib])).toBe(true);
    expect(isInsideDirs(join(lib, "nested", "b.gguf"), [lib])).toBe(true);
    expect(isInsideDirs(join(lib, "new.gguf"), [lib])).toBe(true);
    expect(isInsideDirs(lib, [lib])).toBe(true);
    expect(isInsideDirs(join(other, "c.gguf"), [lib, other])).toBe(true);
  });

  it("refuses .. escapes, symlinks out, and sibling folders that share a prefix", () => {
    expect(isInsideDirs(join(lib, "..", "other", "c.gguf"), [lib])).toBe(false);
    expect(isInsideDirs(join(lib, "escape.gguf"), [lib])).toBe(false);
    expect(isInsideDirs(join(root, "library", "d.gguf"), [lib])).toBe(false);
    expect(isInsideDirs(root, [lib])).toBe(false);
    expect(isInsideDirs(join(lib, "a.gguf"), [])).toBe(false);
  });

  it("resolves symlinked folders on both sides", () => {
    expect(isInsideDirs(join(root, "lib-link", "a.gguf"), [lib])).toBe(true);
    expect(isInsideDirs(join(lib, "a.gguf"), [join(root, "lib-link")])).toBe(true);
  });
});
