import { spawn } from "node:child_process";
import type { CacheOptions } from "../src/engines/local/index.js";
import type { ChatTurn, Conversation, HistorySoFar } from "../src/engine/index.js";
import { scriptedTrajectory } from "../testkit/scriptedTrajectory.js";
import { exchangeMessage, LOAD_LORA, OFFLOAD_LORA } from "../src/library/weightActions.js";

/**
 * The replayed soft trajectory of the `trajectory` scenario: S3's 12 switches (the base picks plan, search twice,
 * plan again, search, then write, releasing in between), now with the stages' tool calls and their latencies.
 * Each adapter stage acts (a model turn), calls its tools (a turn each, the result appended), then releases; the
 * base writes one turn before each load. Generated text is not appended (the history is the same for every
 * engine, token for token); the exchanges are. While a tool runs, the history so far holds the turn that called
 * it (as a session's does once the model's turn is recorded), its result still awaited.
 */
export const SWITCHES: readonly (string | null)[] = [
  "plan",
  null,
  "search",
  null,
  "search",
  null,
  "plan",
  null,
  "search",
  null,
  "write",
  null,
];

/** The scripted tool latencies. */
export const TOOL_MS = { search: 300, read: 200, run_code: 1000 } as const;
export type ToolName = keyof typeof TOOL_MS;

/** The tools each adapter's stage calls, in order. */
const STAGE_TOOLS: Readonly<Record<string, readonly ToolName[]>> = {
  plan: ["run_code"],
  search: ["search", "read"],
  write: ["read"],
};

export type Step =
  | { kind: "turn"; conversation: Conversation; afterSwitch: boolean }
  | { kind: "switch"; to: string | null; conversation: Conversation }
  | { kind: "tool"; name: ToolName; ms: number; soFar: HistorySoFar };

const RESULTS: Readonly<Record<ToolName, (i: number) => string>> = {
  search: (i) =>
    Array.from(
      { length: 3 },
      (_, k) =>
        `[${k + 1}] seine-${i}-${k}: The Seine rises at Source-Seine, crosses Paris and reaches the English Channel at Le Havre.`,
    ).join("\n"),
  read: (i) =>
    `Document seine-${i}: ${"The Seine is 777 km long; its basin covers 79,000 square kilometres and it flows through Troyes, Paris and Rouen. ".repeat(2)}`,
  run_code: (i) => `stdout: the estimate for step ${i} is 777 km\nexit_code: 0`,
};

const FUNCTIONS: Conversation["functions"] = {
  ...scriptedTrajectory(0).functions,
  read: {
    description: "Read a search result or a URL as text.",
    parameters: { type: "object", properties: { id_or_url: { type: "string" } } },
  },
  run_code: {
    description: "Run a Python or JavaScript snippet in a sandbox.",
    parameters: {
      type: "object",
      properties: { language: { enum: ["python", "javascript"] }, code: { type: "string" } },
    },
  },
};

/** The trajectory's opening: the system prompt, the function docs and the task (its first turn's conversation). */
export function openingConversation(): Conversation {
  return { turns: scriptedTrajectory(0).turns, functions: FUNCTIONS };
}

/** A library's manifest texts: what the model reads after a load (`activation`) and a release of each alias. */
export type ExchangeTexts = Readonly<Record<string, { activation?: string; release?: string }>>;

/**
 * The scenario's steps; `switches` shortens it (the 0.6B shape runs the first few). `texts` renders the load and
 * release results as the server does for a library's entries (an activated LoRA finds its invocation there);
 * without it, the scenario's own short texts.
 */
export function toolTrajectory(switches = SWITCHES.length, texts?: ExchangeTexts): Step[] {
  const turns: ChatTurn[] = [...openingConversation().turns];
  const conversation = (): Conversation => ({ turns: [...turns], functions: FUNCTIONS });
  const exchange = (text: string, name: string, args: Record<string, unknown>, result: string) =>
    turns.push({ role: "assistant", text, calls: [{ name, arguments: args, result }] });
  const steps: Step[] = [];
  let active: string | null = null;
  let n = 0;
  for (const to of SWITCHES.slice(0, switches)) {
    if (to !== null) {
      steps.push({ kind: "turn", conversation: conversation(), afterSwitch: steps.at(-1)?.kind === "switch" });
      exchange(
        `I need the ${to} capability.`,
        "load_lora",
        { adapter: to },
        texts
          ? exchangeMessage(texts[to], LOAD_LORA, to)
          : `${to} capability active. Work, then release with offload_lora.`,
      );
      steps.push({ kind: "switch", to, conversation: conversation() });
      for (const tool of STAGE_TOOLS[to] ?? []) {
        steps.push({ kind: "turn", conversation: conversation(), afterSwitch: steps.at(-1)?.kind === "switch" });
        const text = `Calling ${tool}.`;
        const args = { query: `seine fact ${n}` };
        const soFar = {
          conversation: { turns: [...turns, { role: "assistant" as const, text, calls: [] }], functions: FUNCTIONS },
          awaiting: [{ name: tool, arguments: args }],
        };
        steps.push({ kind: "tool", name: tool, ms: TOOL_MS[tool], soFar });
        exchange(text, tool, args, RESULTS[tool](n++));
      }
      steps.push({ kind: "turn", conversation: conversation(), afterSwitch: false });
    } else {
      exchange(
        `Done with ${active}.`,
        "offload_lora",
        { handoff: `The ${active} stage found that the Seine is 777 km long.` },
        texts ? exchangeMessage(texts[active!], OFFLOAD_LORA, active!) : `${active} capability released.`,
      );
      steps.push({ kind: "switch", to: null, conversation: conversation() });
    }
    active = to;
  }
  steps.push({ kind: "turn", conversation: conversation(), afterSwitch: steps.at(-1)?.kind === "switch" });
  return steps;
}

/**
 * Runs a tool of the scenario: a sleep, or for run_code in `cpu` mode a real computation in a process of its
 * own, `work` loop iterations (calibrated to take the scripted latency on an idle machine), so background
 * evaluation competes with it for the cores.
 */
export async function runTool(name: ToolName, ms: number, mode: "sleep" | "cpu", work: number): Promise<void> {
  if (mode === "sleep" || name !== "run_code") return new Promise((resolve) => setTimeout(resolve, ms));
  await new Promise<void>((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ["-e", `let x = 0; for (let i = 0; i < ${work}; i++) x += Math.sqrt(i); if (x < 0) console.log(x);`],
      { stdio: "ignore" },
    );
    child.once("error", reject);
    child.once("exit", () => resolve());
  });
}

/** Loop iterations run_code's computation needs for `ms` on this machine now (measured in a process of its own). */
export async function calibrateWork(ms: number): Promise<number> {
  const probe = 20_000_000;
  const time = async () => {
    const started = performance.now();
    await runTool("run_code", 0, "cpu", probe);
    return performance.now() - started;
  };
  const base = await time();
  const spawnMs = await (async () => {
    const started = performance.now();
    await runTool("run_code", 0, "cpu", 0);
    return performance.now() - started;
  })();
  return Math.round((probe * Math.max(1, ms - spawnMs)) / Math.max(1, base - spawnMs));
}

/** One strategy's figures on the trajectory scenario: what `--scenario trajectory --json` prints, one line each. */
export interface TrajectoryFigures {
  strategy: string;
  tools: "sleep" | "cpu";
  switches: number;
  /** Prompt tokens evaluated in all (for callers and ahead of time). */
  evaluatedTokens: number;
  /** Of those, evaluated ahead of time. */
  backgroundTokens: number;
  /**
   * What callers waited for because of switches: inside load/offload, plus the prefill the next turn still had to do.
   */
  criticalPathMs: number;
  /** Inside the switch calls alone. */
  switchMs: number;
  wallMs: number;
  /** The longest a caller waited on one background decode, and the longest such decode (local engine only). */
  maxWaitForBackgroundMs?: number;
  maxBackgroundDecodeMs?: number;
  /** Local engine only: RSS once the model is loaded, and once its contexts exist (their KV cache included). */
  rssLoadedMB?: number;
  rssWithContextsMB?: number;
}

/** One run of the local engine on the scenario, in a process of its own (trajectoryRun.ts). */
export interface TrajectoryRunConfig {
  strategy: string;
  cache: CacheOptions;
  modelPath: string;
  adapters: Record<string, string>;
  tools: "sleep" | "cpu";
  /** run_code's loop iterations in `cpu` mode. */
  work: number;
  switches: number;
  threads: number;
  /** The engine's `swaFullCache` (sliding-window models only); default the engine's. */
  swaFullCache?: boolean;
  /** The library's load and release texts (toolTrajectory); default the scenario's own. */
  texts?: ExchangeTexts;
}
