import { describe, expect, it } from "vitest";
import { ResidentAdapters } from "../../native/adapters/ResidentAdapters.js";
import { laneKey } from "../../native/cache/laneKey.js";

const MODEL = "ab".repeat(32);
const v = (alias: string, sha: string, scale = 1) => ResidentAdapters.idOf(alias, sha.repeat(64 / sha.length), scale);

describe("adapter versions", () => {
  it("a version is alias, content hash and scale: each of them makes another version", () => {
    expect(v("plan", "1")).toBe(`plan@${"1".repeat(64)}x1`);
    const all = [v("plan", "1"), v("plan", "2"), v("plan", "1", 0.5), v("search", "1")];
    expect(new Set(all).size).toBe(4);
  });

  it("the alias is read back from a version id, even one whose alias contains the separators", () => {
    expect(ResidentAdapters.aliasOf(v("plan", "1"))).toBe("plan");
    expect(ResidentAdapters.aliasOf(v("my@adapter", "f", 0.25))).toBe("my@adapter");
    expect(ResidentAdapters.aliasOf(v("x1", "2", 2))).toBe("x1");
  });
});

describe("lane keys", () => {
  it("name the base model and the exact versions, in any order", () => {
    expect(laneKey(MODEL, [])).toBe(`${"ab".repeat(8)}:base`);
    expect(laneKey(MODEL, [v("plan", "1")])).toBe(`${"ab".repeat(8)}:${v("plan", "1")}`);
    expect(laneKey(MODEL, [v("search", "2"), v("plan", "1")])).toBe(`${"ab".repeat(8)}:${v("plan", "1")}+${v("search", "2")}`);
    expect(laneKey(MODEL, [v("plan", "1"), v("search", "2")])).toBe(laneKey(MODEL, [v("search", "2"), v("plan", "1")]));
  });

  it("differ for another base model, a refreshed file, another scale, or another set", () => {
    const keys = [
      laneKey(MODEL, [v("plan", "1")]),
      laneKey("cd".repeat(32), [v("plan", "1")]),
      laneKey(MODEL, [v("plan", "2")]),
      laneKey(MODEL, [v("plan", "1", 0.5)]),
      laneKey(MODEL, [v("plan", "1"), v("search", "1")]),
      laneKey(MODEL, []),
    ];
    expect(new Set(keys).size).toBe(keys.length);
  });

  it("do not reorder the caller's list", () => {
    const versions = [v("search", "2"), v("plan", "1")];
    laneKey(MODEL, versions);
    expect(versions).toEqual([v("search", "2"), v("plan", "1")]);
  });
});
