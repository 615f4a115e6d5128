import { writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { callTool, connectClient, spawnHttpServer } from "../testkit/mcpClient.js";
import { startLlamaServer } from "../testkit/llamaServerProcess.js";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { DemoWeights } from "../src/demo/demoWeights.js";
import type { CacheStats, DecodeRoundStats } from "../src/engine/index.js";
import { PACKAGE_ROOT } from "../src/paths.js";
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
  /** KV lanes the engine spilled to make room, per turn ("-": a serving engine's own business). */
  spillsPerTurn: string;
  /** Decodes per decode round: above 1, sessions decoded in one batch ("-": a serving engine's own business). */
  decodesPerRound: string;
}

/** What the engine's KV cache resource (weact://cache) says of its spills and decode rounds. */
interface EngineCounts {
  spilled: number;
  rounds?: DecodeRoundStats;
}

/** A row from the measured turn and switch latencies (ms) of a run that took `wallS` seconds. */
export function concurrencyRow(
  backend: string,
  sessions: number,
  turns: readonly number[],
  switches: readonly number[],
  wallS: number,
  counts?: { before: EngineCounts; after: EngineCounts },
): ConcurrencyRow {
  // only an engine with decode rounds (the local one) reports its spills and rounds here
  const before = counts?.before.rounds;
  const after = counts?.after.rounds;
  const local = counts && before && after ? { counts, before, after } : undefined;
  return {
    backend,
    sessions,
    turns: turns.length,
    wallS: fmt(wallS),
    turnsPerS: fmt(turns.length / wallS),
    turnP50Ms: fmt(quantile([...turns], 0.5)),
    turnP95Ms: fmt(quantile([...turns], 0.95)),
    switchP50Ms: fmt(quantile([...switches], 0.5)),
    spillsPerTurn: local ? fmt((local.counts.after.spilled - local.counts.before.spilled) / turns.length) : "-",
    decodesPerRound: local
      ? fmt((local.after.decodes - local.before.decodes) / Math.max(1, local.after.rounds - local.before.rounds))
      : "-",
  };
}

async function engineCounts(client: Client): Promise<EngineCounts> {
  const result = await client.readResource({ uri: "weact://cache" });
  const stats = JSON.parse((result.contents[0] as { text: string }).text) as CacheStats;
  return { spilled: stats.evictions.spilled, rounds: stats.decodeRounds };
}

/**
 * N client-driven sessions at once over MCP (Streamable HTTP), each its own client: load an adapter, a turn under it,
 * release it, a turn on the base, for `rounds` rounds over plan/search/write. Turn latency is the generate call's
 * round trip; turns per second count every session's turns over the run's wall time; spills and decode rounds are the
 * engine's own figures over the run (weact://cache).
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
    const before = await engineCounts(clients[0]!.client);
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
      }),
    );
    const wallS = (performance.now() - started) / 1000;
    const after = await engineCounts(clients[0]!.client);
    await Promise.all(
      clients.map(({ client }, i) => callTool(client, "close_session", { session_id: ids[i]!.session_id })),
    );
    return concurrencyRow(backend, sessions, turns, switches, wallS, { before, after });
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/** One server spawned from `config`, driven at each session count in turn (`drive`), then stopped. */
async function driveServer(
  config: string,
  backend: string,
  sessionCounts: readonly number[],
  rounds: number,
  turn: UniformTurn,
): Promise<ConcurrencyRow[]> {
  const http = await spawnHttpServer(["--config", config]);
  try {
    const rows: ConcurrencyRow[] = [];
    for (const n of sessionCounts) rows.push(await drive(http.url, backend, n, rounds, turn));
    return rows;
  } finally {
    await http.stop();
  }
}

/** A model the concurrency run serves: its file, its plan/search/write adapters, how a weact config names them. */
export interface ConcurrencyTarget {
  label: string;
  /** The GGUF llama-server loads. */
  model: string;
  /** plan, search and write, in that order (llama-server's adapter files). */
  adapters: readonly string[];
  /** What a weact config says of the model and its library (the local engine's and the remote backend's codec). */
  config: { model: Record<string, unknown>; adapters?: Record<string, unknown> };
  turn: UniformTurn;
}

/** The random demo model and its demo library. */
export function demoTarget(demo: DemoWeights): ConcurrencyTarget {
  return {
    label: "demo (random)",
    model: demo.model,
    adapters: ADAPTERS.map((a) => demo.adapters[a]!),
    config: { model: { demo: "random" } },
    turn: TURN,
  };
}

/** Gemma 3's own tokens: its end of turn, its end of text, and the first token of the `||call:` trigger. */
export const GEMMA_TURN: UniformTurn = {
  max_tokens: 16,
  token_bias: { "<end_of_turn>": -100, "<eos>": -100, "||": -100 },
};
export const GEMMA_LIBRARY = join(PACKAGE_ROOT, "models", "gemma3");

/** Gemma 3 270M (the file at `model`) and the shipped library trained for it (models/gemma3). */
export function gemmaTarget(model: string): ConcurrencyTarget {
  return {
    label: "Gemma 3 270M",
    model,
    adapters: ADAPTERS.map((a) => join(GEMMA_LIBRARY, `${a}.gguf`)),
    config: { model: { path: model }, adapters: { manifest: join(GEMMA_LIBRARY, "manifest.json") } },
    turn: GEMMA_TURN,
  };
}

/**
 * The local engine's sizes in these runs: 4 contexts of 16 sequences, one context per weight set (the lane pool makes
 * each home to one) with room for every session's lanes, so sessions under one set decode in one batch.
 */
export const localEngineModel = (threads: number) => ({
  gpu: false,
  threads,
  maxContexts: 4,
  sequencesPerContext: 16,
});

/** A local engine configuration in the run: its label and what it adds to the model's config (e.g. a binding). */
export interface LocalVariant {
  label: string;
  model?: Record<string, unknown>;
}

/**
 * The same client-driven load on the local engine (each of `locals`) and on the remote backend over a llama-server
 * (which batches the slots' requests), the same model and threads, side by side in one run (`localEngineModel`).
 */
export async function concurrencyComparison(
  target: ConcurrencyTarget,
  dir: string,
  sessionCounts: readonly number[],
  rounds: number,
  threads = availableParallelism(),
  locals: readonly LocalVariant[] = [{ label: "local" }],
): Promise<{ rows: ConcurrencyRow[]; targets: Record<string, string>[] }> {
  const limits = SESSION_LIMITS;
  const write = (name: string, config: { model?: Record<string, unknown>; engine?: unknown }) => {
    const path = join(dir, name);
    writeFileSync(
      path,
      JSON.stringify({
        model: { contextSize: CONTEXT, ...target.config.model, ...config.model },
        ...(target.config.adapters ? { adapters: target.config.adapters } : {}),
        sessions: limits,
        ...(config.engine ? { engine: config.engine } : {}),
      }),
    );
    return path;
  };
  const rows: ConcurrencyRow[] = [];
  const run = async (backend: string, config: string) => {
    rows.push(...(await driveServer(config, backend, sessionCounts, rounds, target.turn)));
  };
  for (const [i, local] of locals.entries()) {
    const model = { ...localEngineModel(threads), ...local.model };
    await run(local.label, write(`local-${i}.json`, { model }));
  }
  const llama = await startLlamaServer({
    model: target.model,
    adapters: target.adapters,
    threads,
    slots: SLOTS,
    contextPerSlot: CONTEXT,
  });
  try {
    await run(
      "llama-server",
      write("remote.json", {
        engine: { backend: "remote", remote: { url: llama.url, flavor: "llama-server", maxInFlight: SLOTS } },
      }),
    );
  } finally {
    await llama.stop();
  }
  return { rows, targets: locals.map((l) => targetCheck(rows, l.label, sessionCounts)) };
}

/**
 * The concurrency targets for one local configuration: turns/s at the most sessions at least its own at 1 session and at least
 * llama-server's at each count above 1; p95 turn latency at the most sessions at most 3x its p50. Also the stricter
 * reading: at each count in between, at least llama-server's at that count.
 */
function targetCheck(
  rows: readonly ConcurrencyRow[],
  local: string,
  counts: readonly number[],
): Record<string, string> {
  const at = (backend: string, n: number) => rows.find((r) => r.backend === backend && r.sessions === n)!;
  const perS = (backend: string, n: number) => Number(at(backend, n).turnsPerS);
  const most = Math.max(...counts);
  const above = counts.filter((c) => c > 1);
  const verdict = (ok: boolean, text: string) => `${ok ? "met" : "MISSED"}: ${text}`;
  const top = at(local, most);
  const out: Record<string, string> = {
    backend: local,
    [`${most} vs 1 session`]: verdict(
      perS(local, most) >= perS(local, 1),
      `${top.turnsPerS} vs ${at(local, 1).turnsPerS}`,
    ),
    [`${most} vs llama-server at ${above.join(", ")}`]: verdict(
      above.every((n) => perS(local, most) >= perS("llama-server", n)),
      `${top.turnsPerS} vs ${above.map((n) => at("llama-server", n).turnsPerS).join(", ")}`,
    ),
  };
  for (const n of above.filter((c) => c !== most))
    out[`${n} vs llama-server at ${n}`] = verdict(
      perS(local, n) >= perS("llama-server", n),
      `${at(local, n).turnsPerS} vs ${at("llama-server", n).turnsPerS}`,
    );
  out[`p95 <= 3 x p50 at ${most}`] = verdict(
    Number(top.turnP95Ms) <= 3 * Number(top.turnP50Ms),
    `${top.turnP95Ms} vs ${top.turnP50Ms} ms`,
  );
  return out;
}

/**
 * The same client-driven load on the local engine alone under each of `locals` (no llama-server), each variant's
 * server `repeats` times, the variants alternating so that a shared machine's drift falls on all of them alike.
 * Rows come in run order, each labelled with its variant and repetition.
 */
export async function localVariants(
  target: ConcurrencyTarget,
  dir: string,
  sessionCounts: readonly number[],
  rounds: number,
  threads: number,
  locals: readonly LocalVariant[],
  repeats: number,
): Promise<ConcurrencyRow[]> {
  const rows: ConcurrencyRow[] = [];
  for (let rep = 0; rep < repeats; rep++)
    for (const [i, local] of locals.entries()) {
      const path = join(dir, `local-${i}.json`);
      writeFileSync(
        path,
        JSON.stringify({
          model: { contextSize: CONTEXT, ...target.config.model, ...localEngineModel(threads), ...local.model },
          ...(target.config.adapters ? { adapters: target.config.adapters } : {}),
          sessions: SESSION_LIMITS,
        }),
      );
      rows.push(...(await driveServer(path, local.label, sessionCounts, rounds, target.turn)));
    }
  return rows;
}
