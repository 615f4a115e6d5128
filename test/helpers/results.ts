import type { Client } from "@modelcontextprotocol/sdk/client/index.js";

/** The structured results the MCP tests read, whichever engine serves the server under test. */

export interface Generated {
  text: string;
  tool_calls: { id: string; name: string; arguments: Record<string, unknown> }[];
  finish_reason: string;
  adapter: string | null;
  tokens: { prompt: number; cached: number; evaluated: number; generated: number };
  logprobs?: { token: number; logprob: number }[];
}

export interface SessionState {
  active_adapter: string | null;
  pending_calls: { id: string }[];
  history: { role: string; content: string; name?: string; is_error?: boolean; tool_calls?: { name: string }[] }[];
  prompt_tokens?: number[];
  kv_lanes: { weights: string; active: boolean; state: string; tokens: number }[];
}

export interface RunResult {
  trace_id: string;
  trace_uri: string;
  answer: string;
  finish: string;
  stages: string[];
  switches: number;
  rebuilt_tokens: number;
  reused_tokens: number;
  time: {
    wallMs: number;
    unattributedShare: number;
    model: Record<string, number>;
    cacheRebuild: number;
    adapterControl: number;
  };
}

export interface TraceEvent {
  type: string;
  [k: string]: unknown;
}

/** A run's trace events, read through its MCP resource. */
export const readTrace = async (client: Client, uri: string) =>
  JSON.parse(((await client.readResource({ uri })).contents[0] as { text: string }).text) as TraceEvent[];

/** Harness runs outlast the SDK's default 60 s request timeout on two cores. */
export const LONG = { timeout: 300_000 };

/** The random demo model rarely ends a string argument on its own; a bias on the quote token makes it. */
export const Q = { '"': 8 };

/**
 * A hard run whose plan stage ends by the model's own offload_lora and whose search stage calls search, then offloads.
 */
export const HARD_STEERING = [
  { adapter: "plan", turn: 1, tool: "offload_lora", bias: Q },
  { adapter: "search", turn: 1, tool: "search", bias: Q },
  { adapter: "search", turn: 2, tool: "offload_lora", bias: Q },
];

/** A soft run whose base loads a capability by its own call, which hands back at once. */
export const SOFT_STEERING = [
  { adapter: "base", turn: 1, tool: "load_lora" },
  { adapter: "*", turn: 1, tool: "offload_lora", bias: Q },
];
