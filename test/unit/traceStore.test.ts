import { execFileSync } from "node:child_process";
import { readdirSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TraceStore } from "../../src/harness/trace/TraceStore.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";

/** `count` traces of `owner`, the i-th last written i seconds after the epoch plus a day. */
function traces(count: number, owner = "token:alice"): { dir: string; ids: string[] } {
  const dir = tempDir("weact-traces-");
  const ids = Array.from({ length: count }, (_, i) => `t_trace${String(i).padStart(5, "0")}`);
  ids.forEach((id, i) => {
    const file = join(dir, `${id}.jsonl`);
    writeFileSync(file, `${JSON.stringify({ type: "run_start", owner, task: "x" })}\n`);
    utimesSync(file, 86_400 + i, 86_400 + i);
  });
  return { dir, ids };
}

describe("TraceStore", () => {
  it("prune keeps the most recently written traces (harness.maxTraceFiles) and deletes the rest, oldest first", async () => {
    const { dir, ids } = traces(30);
    writeFileSync(join(dir, "notes.txt"), "not a trace: left alone");
    await new TraceStore(dir).prune(10);
    expect(readdirSync(dir).sort()).toEqual([...ids.slice(20).map((id) => `${id}.jsonl`), "notes.txt"].sort());
    await new TraceStore(dir).prune(10); // at the limit: nothing more goes
    expect(readdirSync(dir)).toHaveLength(11);
  });

  it("lists all of an owner's traces under a low open-file limit (opens a few at a time, not all at once)", () => {
    const { dir } = traces(400);
    const store = join(PACKAGE_ROOT, "dist", "src", "harness", "trace", "TraceStore.js");
    const script = `import(${JSON.stringify(store)}).then(async (m) => console.log((await new m.TraceStore(${JSON.stringify(dir)}).list("token:alice")).length))`;
    const out = execFileSync("prlimit", ["--nofile=128", "--", process.execPath, "-e", script], { encoding: "utf8" });
    expect(Number(out.trim())).toBe(400);
  });
});
