import { execFileSync } from "node:child_process";
import { appendFileSync, readdirSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TraceStore } from "../../src/harness/trace/TraceStore.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";

/** `count` traces of `owner`, the i-th last written i seconds after the epoch plus a day. */
function traces(count: number, owner = "token:alice"): { dir: string; ids: string[] } {
  const dir = tempDir("weact-traces-");
  const ids = Array.from({ length: count }, (_, i) => `t_trace${String(i).padStart(5, "0")}`);
  ids.forEach((id, i) => writeTrace(dir, id, { owner, at: 86_400 + i }));
  return { dir, ids };
}

/** A trace as a run writes it: its run_start line (the task `taskBytes` long), then an event, last written `at`. */
function writeTrace(dir: string, id: string, t: { owner: string; at: number; taskBytes?: number }): void {
  const file = join(dir, `${id}.jsonl`);
  writeFileSync(file, `${JSON.stringify({ type: "run_start", owner: t.owner, task: "x".repeat(t.taskBytes ?? 1) })}\n`);
  appendFileSync(file, `${JSON.stringify({ type: "run_end", answer: "Paris" })}\n`);
  utimesSync(file, t.at, t.at);
}

const MIB = 1024 * 1024;
const NO_BYTE_LIMIT = Number.MAX_SAFE_INTEGER;

describe("TraceStore", () => {
  it("prune keeps the most recently written traces (harness.maxTraceFiles) and deletes the rest, oldest first", async () => {
    const { dir, ids } = traces(30);
    writeFileSync(join(dir, "notes.txt"), "not a trace: left alone");
    const limits = { maxFiles: 10, maxBytesPerOwner: NO_BYTE_LIMIT };
    await new TraceStore(dir).prune("token:alice", new Set([ids.at(-1)!]), limits);
    expect(readdirSync(dir).sort()).toEqual([...ids.slice(20).map((id) => `${id}.jsonl`), "notes.txt"].sort());
    await new TraceStore(dir).prune("token:alice", new Set([ids.at(-1)!]), limits); // at the limit: nothing more goes
    expect(readdirSync(dir)).toHaveLength(11);
  });

  it("prune holds a client's traces to its byte quota (harness.maxTraceMiBPerClient), its oldest first, never another's", async () => {
    const dir = tempDir("weact-traces-");
    // bob's traces are older and larger than all of alice's together: a quota by bytes must still leave them alone
    writeTrace(dir, "t_bob0000001", { owner: "token:bob", at: 86_400, taskBytes: 3 * MIB });
    writeTrace(dir, "t_bob0000002", { owner: "token:bob", at: 86_401, taskBytes: 3 * MIB });
    for (let i = 0; i < 6; i++)
      writeTrace(dir, `t_alice000${i}`, { owner: "token:alice", at: 86_500 + i, taskBytes: MIB / 2 });
    const limits = { maxFiles: 1000, maxBytesPerOwner: 2 * MIB };
    await new TraceStore(dir).prune("token:alice", new Set(["t_alice0005"]), limits);
    // 6 x 0.5 MiB (plus their other bytes) in a 2 MiB quota: the three newest fit, the three oldest go
    expect(readdirSync(dir).sort()).toEqual(
      ["t_alice0003", "t_alice0004", "t_alice0005", "t_bob0000001", "t_bob0000002"].map((id) => `${id}.jsonl`),
    );
    expect(await new TraceStore(dir).list("token:bob")).toEqual(["t_bob0000001", "t_bob0000002"]);

    // a run whose own trace alone is over the quota keeps it (its run is still writing it); its older ones go
    writeTrace(dir, "t_alice0006", { owner: "token:alice", at: 86_600, taskBytes: 3 * MIB });
    await new TraceStore(dir).prune("token:alice", new Set(["t_alice0006"]), limits);
    expect(await new TraceStore(dir).list("token:alice")).toEqual(["t_alice0006"]);
    expect(await new TraceStore(dir).list("token:bob")).toEqual(["t_bob0000001", "t_bob0000002"]);
  });

  it("prune never deletes the trace of a run still writing it, however long ago its last event (a run waiting on its client)", async () => {
    const dir = tempDir("weact-traces-");
    // the waiting run's trace is the least recently written: first in line for the byte quota and the file count
    writeTrace(dir, "t_waiting01", { owner: "token:alice", at: 86_400, taskBytes: 1.5 * MIB });
    writeTrace(dir, "t_done000000", { owner: "token:alice", at: 86_500, taskBytes: MIB });
    for (let i = 1; i < 4; i++) writeTrace(dir, `t_done00000${i}`, { owner: "token:alice", at: 86_500 + i });
    writeTrace(dir, "t_starting1", { owner: "token:alice", at: 86_600 });
    const live = new Set(["t_waiting01", "t_starting1"]);
    await new TraceStore(dir).prune("token:alice", live, { maxFiles: 3, maxBytesPerOwner: 2 * MIB });
    expect(readdirSync(dir).sort()).toEqual(["t_done000003", "t_starting1", "t_waiting01"].map((id) => `${id}.jsonl`));
    // and its owner still reads it whole, run_start first
    expect(await new TraceStore(dir).read("token:alice", "t_waiting01")).toMatchObject([
      { type: "run_start" },
      { type: "run_end" },
    ]);
  });

  it("lists all of an owner's traces under a low open-file limit (opens a few at a time, not all at once)", () => {
    const { dir } = traces(400);
    const store = join(PACKAGE_ROOT, "dist", "src", "harness", "trace", "TraceStore.js");
    const script = `import(${JSON.stringify(store)}).then(async (m) => console.log((await new m.TraceStore(${JSON.stringify(dir)}).list("token:alice")).length))`;
    const out = execFileSync("prlimit", ["--nofile=128", "--", process.execPath, "-e", script], { encoding: "utf8" });
    expect(Number(out.trim())).toBe(400);
  });
});
