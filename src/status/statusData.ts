import { basename } from "node:path";
import type { RecentRun } from "../harness/trace/RecentRuns.js";
import type { ServerContext } from "../mcp/context.js";

/** Who is looking: an identity sees its own sessions and runs in full, others' only as counts; an admin sees all. */
export interface Viewer {
  identity: string | undefined;
  admin: boolean;
  /** Through the page's login form (a cookie), which the page then offers to end. */
  loggedIn?: boolean;
}

const countBy = <T>(items: readonly T[], key: (t: T) => string) =>
  items.reduce<Record<string, number>>((acc, t) => ((acc[key(t)] = (acc[key(t)] ?? 0) + 1), acc), {});

/**
 * The status page's data (also GET /status.json): the model and adapters, the cache, the work queue, the
 * viewer's own sessions and recent runs, and for everyone else counts per state. Texts are data; the page
 * renders them as text.
 */
export function statusData(ctx: ServerContext, viewer: Viewer, extra: { connections: number; suspendedRuns: number }) {
  const mine = (owner: string) => viewer.admin || owner === viewer.identity;
  const { sessions, queue } = ctx.sessions.overview();
  const now = Date.now();
  const sessionState = (s: (typeof sessions)[number]) => (s.lock.depth > 0 ? "working" : "idle");
  const runs = ctx.harness.recent?.list() ?? [];
  const model = ctx.runtime.engine.model;
  return {
    generated_at: new Date(now).toISOString(),
    viewer: { identity: viewer.identity ?? null, admin: viewer.admin, logged_in: Boolean(viewer.loggedIn) },
    model: { file: basename(model.filePath), sha256: model.sha256, architecture: model.architecture },
    adapters: ctx.runtime.library.list().map(({ entry, info }) => ({
      alias: entry.alias,
      sha256: info?.sha256 ?? null,
      scale: entry.scale,
      resident: Boolean(info),
    })),
    cache: ctx.runtime.engine.cacheStats(),
    queue,
    connections: extra.connections,
    suspended_runs: extra.suspendedRuns,
    sessions: {
      mine: sessions
        .filter((s) => mine(s.owner))
        .map((s) => ({
          id: s.id,
          ...(viewer.admin ? { owner: s.owner } : {}),
          task: s.task.slice(0, 300),
          adapter: s.activeAdapter,
          turns: s.history.filter((m) => m.role === "assistant" && m.author === "model").length,
          age_s: Math.round((now - s.createdAt) / 1000),
          state: sessionState(s),
        })),
      others: countBy(
        sessions.filter((s) => !mine(s.owner)),
        sessionState,
      ),
    },
    runs: {
      mine: runs
        .filter((r) => mine(r.owner))
        .slice(-12)
        .reverse()
        .map((r: RecentRun) => {
          const wall = r.wallMs ?? now - r.startedAt;
          // a wait on the client still going on is drawn up to now
          const waiting =
            r.waitingSinceMs === undefined
              ? []
              : [{ kind: "client" as const, startMs: r.waitingSinceMs, ms: Math.max(0, wall - r.waitingSinceMs) }];
          return {
            trace_id: r.traceId,
            task: r.task.slice(0, 300),
            policy: r.policy,
            state: r.state,
            stage: r.stage ?? null,
            adapter: r.adapter ?? null,
            age_s: Math.round((now - r.startedAt) / 1000),
            wall_ms: wall,
            finish: r.finish ?? null,
            degenerate: r.degenerate ?? null,
            grounded: r.grounded ?? null,
            segments: [...r.segments, ...waiting],
          };
        }),
      others: countBy(
        runs.filter((r) => !mine(r.owner)),
        (r) => r.state,
      ),
    },
  };
}
