import type { TraceEvent } from "./Trace.js";
import type { Finish, Policy } from "../types.js";

export type RunState = "running" | "waiting_for_client" | "done" | "cancelled" | "error";

/** One interval of a run's timeline, by what the time went to ("model" per weights: `route`). */
export interface TimelineSegment {
  kind: "setup" | "model" | "tool" | "control" | "cache" | "client";
  route?: string;
  startMs: number;
  ms: number;
}

export interface RecentRun {
  traceId: string;
  owner: string;
  task: string;
  policy: Policy;
  startedAt: number;
  state: RunState;
  stage?: string;
  adapter?: string;
  segments: TimelineSegment[];
  wallMs?: number;
  /** Since when (ms into the run) it waits on the client, while it does. */
  waitingSinceMs?: number;
  /** How a run that returned ended (`FINISHES`). */
  finish?: Finish;
  /** Its output degenerated: the rule that found it and its figures. */
  degenerate?: { rule: string; detail: string };
  /** Its marked answer occurs in nothing the run read (false), or does (true). */
  grounded?: boolean;
}

const round = (n: number) => Number(n.toFixed(1));

/**
 * The last runs of this server process and where their time went, built from their trace events as they are
 * recorded: what the status page draws. Kept in memory, bounded per owner so that one client's flood of runs
 * cannot push another's off the page, and in all (then the owner holding most loses its oldest); the traces on
 * disk stay the record.
 */
export class RecentRuns {
  private readonly runs: RecentRun[] = [];

  constructor(
    private readonly perOwner = 20,
    private readonly total = 200,
  ) {}

  /** Starts following a run; returns the listener to attach to its trace. */
  follow(traceId: string, owner: string, task: string, policy: Policy): (e: TraceEvent) => void {
    const run: RecentRun = {
      traceId,
      owner,
      task: task.slice(0, 500),
      policy,
      startedAt: Date.now(),
      state: "running",
      segments: [],
    };
    this.runs.push(run);
    this.evict(owner);
    /** Calls the client answered: their wait is drawn as client time, not as a tool. */
    const clientCalls = new Set<string>();
    const segment = (kind: TimelineSegment["kind"], e: TraceEvent, route?: string) => {
      const ms = Number(e.ms ?? 0);
      if (ms <= 0) return;
      // the first timed work starts after the session was set up
      if (!run.segments.length && e.t - ms > 0) run.segments.push({ kind: "setup", startMs: 0, ms: round(e.t - ms) });
      run.segments.push({ kind, ...(route ? { route } : {}), startMs: round(e.t - ms), ms: round(ms) });
    };
    /** A switch's KV rebuild ran at its end, inside it: the switch's own control time came before. */
    const rebuiltInLastSwitch = (e: TraceEvent) => {
      const ms = Number(e.ms ?? 0);
      const control = run.segments.at(-1);
      if (ms <= 0) return;
      if (control?.kind !== "control") return segment("cache", e);
      control.startMs = round(control.startMs - ms);
      const setup = run.segments[0];
      if (setup?.kind === "setup" && run.segments.length === 2) setup.ms = round(Math.max(0, control.startMs));
      run.segments.push({ kind: "cache", startMs: round(control.startMs + control.ms), ms: round(ms) });
    };
    return (e) => {
      switch (e.type) {
        case "stage_start":
          run.stage = String(e.stage);
          run.adapter = String(e.adapter);
          break;
        case "model_call":
          segment("model", e, String(e.adapter));
          break;
        case "tool_call":
          if (!clientCalls.has(String(e.callId))) segment("tool", e);
          break;
        case "adapter_control":
          segment("control", e);
          run.adapter = String(e.active ?? "base");
          break;
        case "cache_rebuild":
          rebuiltInLastSwitch(e);
          break;
        case "client_wait":
          run.state = "waiting_for_client";
          run.waitingSinceMs = round(e.t);
          for (const c of (e.calls as { id: string }[] | undefined) ?? []) clientCalls.add(c.id);
          break;
        case "client_resume":
          run.state = "running";
          if (run.waitingSinceMs !== undefined)
            run.segments.push({ kind: "client", startMs: run.waitingSinceMs, ms: round(e.t - run.waitingSinceMs) });
          run.waitingSinceMs = undefined;
          break;
        case "run_end":
          run.state = e.error === undefined ? "done" : e.cancelled ? "cancelled" : "error";
          run.waitingSinceMs = undefined;
          run.wallMs = round(Number((e.time as { wallMs?: number } | undefined)?.wallMs ?? e.t));
          if (e.error === undefined) run.finish = e.finish as Finish;
          if (e.degenerate) {
            const { rule, detail } = e.degenerate as { rule: string; detail: string };
            run.degenerate = { rule, detail };
          }
          if (typeof e.grounded === "boolean") run.grounded = e.grounded;
          break;
      }
    };
  }

  list(): readonly RecentRun[] {
    return this.runs;
  }

  private evict(owner: string): void {
    const held = (who: string) => this.runs.filter((r) => r.owner === who).length;
    if (held(owner) > this.perOwner)
      this.runs.splice(
        this.runs.findIndex((r) => r.owner === owner),
        1,
      );
    if (this.runs.length <= this.total) return;
    const counts = new Map<string, number>();
    for (const r of this.runs) counts.set(r.owner, (counts.get(r.owner) ?? 0) + 1);
    const most = [...counts].reduce((a, b) => (b[1] > a[1] ? b : a))[0];
    this.runs.splice(
      this.runs.findIndex((r) => r.owner === most),
      1,
    );
  }
}
