import { writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { callTool, connectClient, spawnHttpServer } from "../testkit/mcpClient.js";
import { startLlamaServer } from "../testkit/llamaServerProcess.js";
import type { DemoWeights } from "../src/demo/generate.js";
import { fmt, quantile } from "./stats.js";

/** One uniform turn: 16 tokens, no call started, no early end of turn (the model's own tokens for these, by text). */
export interface UniformTurn {
  max_tokens: number;
  token_bias: Record<string, number>;
}
/** The demo model's (Qwen chat template). */
const TURN: UniformTurn = {
  max_tokens: 16,
  token_bias: { "<tool_call>": -100, "<|im_end|>": -100, "<|endoftext|>": -100 },
};
const ADAPTERS = ["plan", "search", "write"] as const;
/** Enough slots for the largest run, one client holding them all. */
export const SLOTS = 16;
export const CONTEXT = 4096;
/** The server's session limits for the largest run, one client holding them all. */
export const SESSION_LIMITS = {
  maxSessions: SLOTS * 2,
  maxSessionsPerClient: SLOTS * 2,
  maxSlotsPerClient: SLOTS,
  maxQueuedPerClient: SLOTS * 2,
  maxQueuedGenerations: SLOTS * 4,
};
/** A 16-session run queues calls behind each other for longer than the SDK's default 60 s. */
const LONG = { timeout: 600_000 };

export interface ConcurrencyRow extends Record<string, string | number> {
  backend: string;
  sessions: number;
  turns: number;
  wallS: string;
  turnsPerS: string;
  turnP50Ms: string;
  turnP95Ms: string;
  switchP50Ms: string;
}

/** A row from the measured turn and switch latencies (ms) of a run that took `wallS` seconds. */
export function concurrencyRow(
  backend: string,
  sessions: number,
  turns: readonly number[],
  switches: readonly number[],
  wallS: number,
): ConcurrencyRow {
  return {
    backend,
    sessions,
    turns: turns.length,
    wallS: fmt(wallS),
    turnsPerS: fmt(turns.length / wallS),
    turnP50Ms: fmt(quantile([...turns], 0.5)),
    turnP95Ms: fmt(quantile([...turns], 0.95)),
    switchP50Ms: fmt(quantile([...switches], 0.5)),
  };
}

/**
 * N client-driven sessions at once over MCP (Streamable HTTP), each its own client: load an adapter, a turn under it,
 * release it, a turn on the base, for `rounds` rounds over plan/search/write. Turn latency is the generate call's
 * round trip; turns per second count every session's turns over the run's wall time.
 */
export async function drive(
  url: string,
  backend: string,
  sessions: number,
  rounds: number,
  turn: UniformTurn = TURN,
): Promise<ConcurrencyRow> {
  const clients = await Promise.all(Array.from({ length: sessions }, () => connectClient("http", { url })));
  try {
    const ids = await Promise.all(
      clients.map(({ client }, i) =>
        callTool<{ session_id: string }>(client, "create_session", {
          task: `Session ${i}: which river flows through Paris?`,
          tools: [],
        }),
      ),
    );
    const turns: number[] = [];
    const switches: number[] = [];
    const timed = async <T>(into: number[], fn: () => Promise<T>) => {
      const started = performance.now();
      const r = await fn();
      into.push(performance.now() - started);
      return r;
    };
    const started = performance.now();
    await Promise.all(
      clients.map(async ({ client }, i) => {
        const session_id = ids[i]!.session_id;
        for (let round = 0; round < rounds; round++) {
          await timed(switches, () =>
            callTool(client, "load_lora", { session_id, adapter: ADAPTERS[(i + round) % ADAPTERS.length] }, LONG),
          );
          await timed(turns, () => callTool(client, "generate", { session_id, ...turn }, LONG));
          await timed(switches, () => callTool(client, "offload_lora", { session_id }, LONG));
          await timed(turns, () => callTool(client, "generate", { session_id, ...turn }, LONG));
        }
        await callTool(client, "close_session", { session_id });
      }),
    );
    return concurrencyRow(backend, sessions, turns, switches, (performance.now() - started) / 1000);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/**
 * The same client-driven load on the local backend (llama.cpp in the server's process: one evaluation per context
 * at a time) and on the remote backend over a llama-server (which batches the slots' requests), each with all the
 * machine's cores (or `threads`), side by side in one run.
 */
export async function concurrencyComparison(
  demo: DemoWeights,
  dir: string,
  sessionCounts: readonly number[],
  rounds: number,
  threads = availableParallelism(),
  /** The local backend's model.binding (default: the config's default). */
  binding?: "prebuilt" | "source" | "auto",
): Promise<{ rows: ConcurrencyRow[]; ratios: Record<string, string>[] }> {
  const limits = SESSION_LIMITS;
  const write = (name: string, config: unknown) => {
    const path = join(dir, name);
    writeFileSync(path, JSON.stringify(config));
    return path;
  };
  const rows: ConcurrencyRow[] = [];
  const run = async (backend: string, config: string) => {
    const http = await spawnHttpServer(["--config", config]);
    try {
      for (const n of sessionCounts) rows.push(await drive(http.url, backend, n, rounds));
    } finally {
      await http.stop();
    }
  };
  // the local engine: 4 contexts of 4 sequences hold 16 sessions; a context evaluates one session's batch at a time
  await run(
    "local",
    write("local.json", {
      model: {
        gpu: false,
        demo: "random",
        threads,
        contextSize: CONTEXT,
        maxContexts: 4,
        sequencesPerContext: 4,
        ...(binding ? { binding } : {}),
      },
      sessions: limits,
    }),
  );
  const llama = await startLlamaServer({
    model: demo.model,
    adapters: ADAPTERS.map((a) => demo.adapters[a]!),
    threads,
    slots: SLOTS,
    contextPerSlot: CONTEXT,
  });
  try {
    await run(
      "llama-server",
      write("remote.json", {
        model: { contextSize: CONTEXT },
        sessions: limits,
        engine: { backend: "remote", remote: { url: llama.url, flavor: "llama-server", maxInFlight: SLOTS } },
      }),
    );
  } finally {
    await llama.stop();
  }
  const ratios = sessionCounts.map((n) => {
    const local = rows.find((r) => r.backend === "local" && r.sessions === n)!;
    const remote = rows.find((r) => r.backend === "llama-server" && r.sessions === n)!;
    return {
      sessions: String(n),
      "turnsPerS llama-server/local": fmt(Number(remote.turnsPerS) / Number(local.turnsPerS)),
      "turnP95 llama-server/local": fmt(Number(remote.turnP95Ms) / Number(local.turnP95Ms)),
    };
  });
  return { rows, ratios };
}
