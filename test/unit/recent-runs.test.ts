import { describe, expect, it } from "vitest";
import { RecentRuns } from "../../src/harness/trace/RecentRuns.js";
import type { TraceEvent } from "../../src/harness/trace/Trace.js";

/** The status page's timelines from trace events alone (the page itself is tested in Chromium: status-page.test.ts). */
describe("recent runs", () => {
  it("draws a run's time: setup, a switch's control then its KV rebuild, model per weights, the client's wait", () => {
    const runs = new RecentRuns(2);
    const follow = runs.follow("t_1", "token:alice", "task", "hard");
    const events: TraceEvent[] = [
      { type: "run_start", t: 0 },
      { type: "adapter_control", t: 10, ms: 2, ok: true, active: "plan" },
      { type: "cache_rebuild", t: 10.1, ms: 5 },
      { type: "stage_start", t: 11, stage: "1:plan", adapter: "plan" },
      { type: "model_call", t: 35, ms: 20, adapter: "plan" },
      { type: "client_wait", t: 40, calls: [{ id: "c1" }] },
    ];
    events.forEach(follow);
    expect(runs.list()[0]).toMatchObject({
      state: "waiting_for_client",
      stage: "1:plan",
      adapter: "plan",
      waitingSinceMs: 40,
    });
    follow({ type: "client_resume", t: 90, ms: 50 });
    follow({ type: "tool_call", t: 90, ms: 50, callId: "c1" }); // the client's call: drawn as its wait, not as a tool
    follow({ type: "tool_call", t: 120, ms: 10, callId: "c2" });
    follow({ type: "run_end", t: 130, time: { wallMs: 130 } });
    const run = runs.list()[0]!;
    expect(run.state).toBe("done");
    expect(run.wallMs).toBe(130);
    expect(run.segments).toEqual([
      { kind: "setup", startMs: 0, ms: 3 },
      { kind: "control", startMs: 3, ms: 2 },
      { kind: "cache", startMs: 5, ms: 5 },
      { kind: "model", route: "plan", startMs: 15, ms: 20 },
      { kind: "client", startMs: 40, ms: 50 },
      { kind: "tool", startMs: 110, ms: 10 },
    ]);
  });

  it("keeps the last runs only, and tells a cancelled run from a failed one", () => {
    const runs = new RecentRuns(2);
    for (const id of ["a", "b", "c"])
      runs.follow(id, "o", "t", "base")({ type: "run_end", t: 1, error: "x", cancelled: id === "c" });
    expect(runs.list().map((r) => `${r.traceId}:${r.state}`)).toEqual(["b:error", "c:cancelled"]);
  });

  it("keeps how a run ended: its finish, the degenerate rule that fired, an ungrounded answer", () => {
    const runs = new RecentRuns();
    const degenerate = { rule: "repetition", detail: "84 % of the turn's 161 runs repeat", stage: "1:plan", turn: 1 };
    runs.follow("junk", "o", "yo whats the deal", "hard")({ type: "run_end", t: 5, finish: "degenerate", degenerate });
    runs.follow("atlantis", "o", "t", "soft")({ type: "run_end", t: 5, finish: "answer", grounded: false });
    runs.follow("ok", "o", "t", "soft")({ type: "run_end", t: 5, finish: "answer", grounded: true });
    runs.follow("failed", "o", "t", "soft")({ type: "run_end", t: 5, finish: "error", error: "x" });
    expect(
      runs
        .list()
        .map(({ traceId, state, finish, degenerate, grounded }) => ({ traceId, state, finish, degenerate, grounded })),
    ).toEqual([
      {
        traceId: "junk",
        state: "done",
        finish: "degenerate",
        degenerate: { rule: "repetition", detail: degenerate.detail },
        grounded: undefined,
      },
      { traceId: "atlantis", state: "done", finish: "answer", degenerate: undefined, grounded: false },
      { traceId: "ok", state: "done", finish: "answer", degenerate: undefined, grounded: true },
      // a run that failed has no finish of its own: its state says it
      { traceId: "failed", state: "error", finish: undefined, degenerate: undefined, grounded: undefined },
    ]);
  });

  it("bounds the runs per owner, so one client's flood leaves another's runs on the page", () => {
    const runs = new RecentRuns(3, 5);
    runs.follow("alice-1", "token:alice", "t", "base");
    for (let i = 1; i <= 50; i++) runs.follow(`mallory-${i}`, "token:mallory", "t", "base");
    runs.follow("alice-2", "token:alice", "t", "base");
    expect(runs.list().map((r) => r.traceId)).toEqual(["alice-1", "mallory-48", "mallory-49", "mallory-50", "alice-2"]);
    // past the total, the owner holding most gives up its oldest
    runs.follow("bob-1", "token:bob", "t", "base");
    expect(runs.list().map((r) => r.traceId)).toEqual(["alice-1", "mallory-49", "mallory-50", "alice-2", "bob-1"]);
  });
});
