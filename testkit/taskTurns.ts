import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { callTool } from "./mcpClient.js";

/**
 * A `run_task` run as the model wrote it: its outcome and every model turn, read from its trace (the `model_call`
 * events), so two runs of one task compare turn by turn. Used by `npm run check:invariance` and the load-invariance
 * test.
 */

/** One model turn: where it ran, the text it wrote and the calls parsed from it, and how many tokens it generated. */
export interface ModelTurn {
  stage: string;
  adapter: string;
  text: string;
  /**
   * The parsed calls (name and arguments; their ids are random) as JSON: the same text parses alike, but a
   * differing argument shows here too.
   */
  calls: string;
  generated: number;
}

export interface TaskRun {
  finish: string;
  answer: string;
  traceId: string;
  turns: ModelTurn[];
  /** The run_task call's wall time. */
  seconds: number;
}

/** Where two runs of one task part: the first model turn (1-based) that differs, and how. */
export interface TurnDifference {
  turn: number;
  stage: string;
  detail: string;
}

/** Harness runs under load outlast the SDK's default 60 s request timeout. */
const RUN_TIMEOUT = { timeout: 1_800_000 };

interface TraceEvent {
  type: string;
  stage?: string;
  adapter?: string;
  text?: string;
  calls?: { name?: unknown; arguments?: unknown }[];
  tokens?: { generated?: number };
}

/** Runs `task` under `policy` (greedy: no seed, no steering) and reads its model turns from the run's trace. */
export async function runTaskTurns(client: Client, task: string, policy: string): Promise<TaskRun> {
  const started = performance.now();
  const r = await callTool<{ finish: string; answer: string; trace_id: string; trace_uri: string }>(
    client,
    "run_task",
    { task, policy },
    RUN_TIMEOUT,
  );
  const seconds = (performance.now() - started) / 1000;
  const resource = await client.readResource({ uri: r.trace_uri });
  const events = JSON.parse((resource.contents[0] as { text: string }).text) as TraceEvent[];
  const turns = events
    .filter((e) => e.type === "model_call")
    .map((e) => ({
      stage: String(e.stage),
      adapter: String(e.adapter),
      text: String(e.text),
      calls: JSON.stringify((e.calls ?? []).map((c) => ({ name: c.name, arguments: c.arguments }))),
      generated: e.tokens?.generated ?? 0,
    }));
  return { finish: r.finish, answer: r.answer, traceId: r.trace_id, turns, seconds };
}

/** The first model turn where `b` differs from `a` (text, calls or token count), or undefined when every one is the same. */
export function firstDifference(a: TaskRun, b: TaskRun): TurnDifference | undefined {
  const n = Math.max(a.turns.length, b.turns.length);
  for (let i = 0; i < n; i++) {
    const x = a.turns[i];
    const y = b.turns[i];
    if (!x || !y)
      return {
        turn: i + 1,
        stage: (x ?? y)!.stage,
        detail: `${a.turns.length} vs ${b.turns.length} turns`,
      };
    const field = (["stage", "adapter", "text", "calls", "generated"] as const).find((f) => x[f] !== y[f]);
    if (field) return { turn: i + 1, stage: x.stage, detail: `${field}: ${excerpt(x[field], y[field])}` };
  }
  return undefined;
}

/** The two values from just before where they part, short enough for a table. */
function excerpt(x: string | number, y: string | number): string {
  if (typeof x === "number" || typeof y === "number") return `${x} vs ${y}`;
  let i = 0;
  while (i < x.length && x[i] === y[i]) i++;
  const from = Math.max(0, i - 12);
  const cut = (s: string) => JSON.stringify(s.slice(from, i + 20));
  return `at char ${i}: ${cut(x)} vs ${cut(y)}`;
}
