import { execFile } from "node:child_process";
import { existsSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { PACKAGE_ROOT } from "../src/paths.js";
import { PROGRESS_EVERY_MS, runWithProgress } from "./buildProgress.js";
import { freePort, spawnEngine, type EngineProcess } from "./engineProcess.js";

/**
 * Starts and stops a llama-server (llama.cpp's HTTP server) for the tests and the benchmarks: the real engine
 * the remote backend talks to. The binary comes from scripts/llama-cpp-build.sh (built once per machine from the
 * llama.cpp source node-llama-cpp ships, cached outside the repository), or from WEACT_LLAMA_SERVER.
 */

export interface LlamaServerOptions {
  /** The base GGUF. */
  model: string;
  /** LoRA GGUF files, loaded at start in this order (their ids are the indexes). */
  adapters?: readonly string[];
  /** 0 or absent: a free loopback port. */
  port?: number;
  /** CPU threads (tests use 1 per process). */
  threads?: number;
  /** Slots (`--parallel`): sessions the engine serves at once. */
  slots?: number;
  /** Context tokens per slot. */
  contextPerSlot?: number;
  /** Anything else, appended as given (a later flag overrides an earlier one). */
  extraArgs?: readonly string[];
  /** Milliseconds to wait for /health (default 60 s). */
  startTimeoutMs?: number;
}

/** A running llama-server. */
export type LlamaServer = EngineProcess;

/**
 * The flags that make llama-server safe for weact-mcp's remote backend: no host-memory prompt cache (it restores
 * a slot's state without checking which adapters computed it: llama.cpp #26207), adapters loaded but applied only
 * by each request's own `lora` list.
 */
export const SAFE_LLAMA_SERVER_FLAGS = ["--cache-ram", "0", "--lora-init-without-apply"] as const;

/**
 * A llama.cpp tool (`llama-server`, `llama-quantize`, ...), building it first when this machine has none (about 20
 * minutes on 2 cores the first time, once), with a progress line on stderr every 30 s while it builds.
 */
async function llamaCppTool(target: string): Promise<string> {
  const stdout = await runWithProgress("bash", [join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), target], {
    label: `${target} build`,
    intro: `building ${target} from llama.cpp's source, once per machine: about 20 minutes on 2 cores (later runs reuse it from ~/.cache/weact-mcp/llama.cpp); a progress line every ${PROGRESS_EVERY_MS / 1000} s`,
    timeoutMs: 45 * 60_000,
  });
  const bin = join(stdout.trim().split("\n").at(-1)!, target);
  if (!existsSync(bin)) throw new Error(`scripts/llama-cpp-build.sh printed no folder holding ${target} (got ${bin})`);
  return bin;
}

/** llama-server: WEACT_LLAMA_SERVER, else the one built here (llamaCppTool). */
export async function llamaServerBinary(): Promise<string> {
  return process.env.WEACT_LLAMA_SERVER || llamaCppTool("llama-server");
}

/**
 * `model` with every tensor in F32, written once beside it (llama-quantize --allow-requantize, built with llama-server;
 * about 4 s and 1.1 GB for Gemma 3 270M). On a K-quant model llama.cpp's CPU kernels give one prompt other figures in
 * another batch split (up to 0.93 nats on Gemma 3 270M: docs/models.md); in F32 nearly the same, so a check against a
 * fresh evaluation can tell a cache bug from the split (test/remote/llama-server-alora.test.ts).
 */
export async function f32Model(model: string): Promise<string> {
  const out = join(dirname(model), `${basename(model, ".gguf")}.f32.gguf`);
  if (existsSync(out)) return out;
  const quantize = await llamaCppTool("llama-quantize");
  const partial = `${out}.${process.pid}.partial`;
  try {
    await promisify(execFile)(quantize, ["--allow-requantize", model, partial, "F32"], { maxBuffer: 16 << 20 });
    renameSync(partial, out);
  } finally {
    rmSync(partial, { force: true }); // a failed run leaves no gigabyte behind
  }
  return out;
}

export function llamaServerArgs(opts: LlamaServerOptions, port: number): string[] {
  const slots = opts.slots ?? 1;
  return [
    "-m",
    opts.model,
    // one --lora per file: this llama.cpp's parser runs --lora's handler for every occurrence and each adds its
    // files (common/arg.cpp), whatever its "specified multiple times" warning says; the ids follow this order
    ...(opts.adapters ?? []).flatMap((a) => ["--lora", a]),
    ...SAFE_LLAMA_SERVER_FLAGS,
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "-t",
    String(opts.threads ?? 1),
    "-np",
    String(slots),
    "-c",
    String(slots * (opts.contextPerSlot ?? 4096)),
    "--no-webui",
    "--no-warmup",
    ...(opts.extraArgs ?? []),
  ];
}

/** Starts llama-server on loopback and resolves once /health answers ok. */
export async function startLlamaServer(opts: LlamaServerOptions): Promise<LlamaServer> {
  const bin = await llamaServerBinary();
  const port = opts.port || (await freePort());
  const args = llamaServerArgs(opts, port);
  const server = await spawnEngine({
    label: "llama-server",
    command: bin,
    args,
    port,
    healthPath: "/health",
    startTimeoutMs: opts.startTimeoutMs ?? 60_000,
  });
  const url = server.url;
  // a request's `lora` ids are indexes into this list: every file loaded, in the order given, or ids name other weights
  const loaded = (await (await fetch(`${url}/lora-adapters`)).json()) as { id: number; path: string }[];
  const expected = (opts.adapters ?? []).map((a) => resolve(a));
  if (loaded.length !== expected.length || loaded.some((l, i) => l.id !== i || resolve(l.path) !== expected[i])) {
    await server.stop();
    throw new Error(
      `llama-server loaded LoRA adapters [${loaded.map((l) => `${l.id}: ${l.path}`).join(", ")}], not [${expected.join(", ")}] in that order`,
    );
  }
  return server;
}
