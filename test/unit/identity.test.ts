import { describe, expect, it } from "vitest";
import { AdapterVersion, WeightSet } from "../../src/engine/index.js";

const MODEL = "ab".repeat(32);
const v = (alias: string, sha: string, scale = 1) => AdapterVersion.of(alias, sha.repeat(64 / sha.length), scale);

describe("adapter versions", () => {
  it("a version is alias, content hash and scale: each of them makes another version", () => {
    expect(v("plan", "1").toString()).toBe(`plan@${"1".repeat(64)}x1`);
    const all = [v("plan", "1"), v("plan", "2"), v("plan", "1", 0.5), v("search", "1")];
    expect(new Set(all.map(String)).size).toBe(4);
    for (const [i, a] of all.entries()) for (const [j, b] of all.entries()) expect(a.equals(b)).toBe(i === j);
    expect(v("plan", "1").equals(v("plan", "1"))).toBe(true);
  });

  it("the PEFT folder an engine loads instead of the GGUF is part of the version: other folder bytes, another version", () => {
    const gguf = "1".repeat(64);
    const a = AdapterVersion.of("plan", gguf, 1, "a".repeat(64));
    const b = AdapterVersion.of("plan", gguf, 1, "b".repeat(64));
    expect(a.equals(b)).toBe(false);
    expect(a.equals(AdapterVersion.of("plan", gguf, 1))).toBe(false);
    expect(a.toString()).toBe(`plan@${gguf}+peft:${"a".repeat(64)}x1`);
    expect(new Set([a, b, AdapterVersion.of("plan", gguf, 1)].map(String)).size).toBe(3);
  });

  it("keeps its alias as a field, even one that contains the separators (nothing is parsed back)", () => {
    expect(v("plan", "1").alias).toBe("plan");
    expect(v("my@adapter", "f", 0.25).alias).toBe("my@adapter");
    expect(v("x1", "2", 2).alias).toBe("x1");
    expect(JSON.stringify({ version: v("x1", "2", 2) })).toBe(JSON.stringify({ version: `x1@${"2".repeat(64)}x2` }));
  });
});

describe("weight sets", () => {
  it("name the base model and the exact versions, in any order", () => {
    expect(WeightSet.of(MODEL, []).toString()).toBe(`${"ab".repeat(8)}:base`);
    expect(WeightSet.of(MODEL, [v("plan", "1")]).toString()).toBe(`${"ab".repeat(8)}:${v("plan", "1")}`);
    expect(WeightSet.of(MODEL, [v("search", "2"), v("plan", "1")]).toString()).toBe(
      `${"ab".repeat(8)}:${v("plan", "1")}+${v("search", "2")}`,
    );
    expect(
      WeightSet.of(MODEL, [v("plan", "1"), v("search", "2")]).equals(
        WeightSet.of(MODEL, [v("search", "2"), v("plan", "1")]),
      ),
    ).toBe(true);
  });

  it("are labelled by their aliases in the order applied (null for the base), whatever their key's order", () => {
    expect(WeightSet.of(MODEL, []).label).toBeNull();
    expect(WeightSet.of(MODEL, [v("search", "2"), v("plan", "1")]).label).toBe("search+plan");
    expect(
      WeightSet.of(MODEL, [v("plan", "1")])
        .baseOnly()
        .equals(WeightSet.of(MODEL, [])),
    ).toBe(true);
  });

  it("differ for another base model, a refreshed file, another scale, or another set", () => {
    const keys = [
      WeightSet.of(MODEL, [v("plan", "1")]),
      WeightSet.of("cd".repeat(32), [v("plan", "1")]),
      WeightSet.of(MODEL, [v("plan", "2")]),
      WeightSet.of(MODEL, [v("plan", "1", 0.5)]),
      WeightSet.of(MODEL, [v("plan", "1"), v("search", "1")]),
      WeightSet.of(MODEL, []),
    ];
    expect(new Set(keys.map(String)).size).toBe(keys.length);
    for (const [i, a] of keys.entries()) for (const [j, b] of keys.entries()) expect(a.equals(b)).toBe(i === j);
  });

  it("do not reorder the caller's list", () => {
    const versions = [v("search", "2"), v("plan", "1")];
    WeightSet.of(MODEL, versions);
    expect(versions.map(String)).toEqual([v("search", "2"), v("plan", "1")].map(String));
  });
});
