import { execFile, spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { PACKAGE_ROOT } from "../src/paths.js";

/**
 * llama-server, built from the llama.cpp source node-llama-cpp ships (scripts/llama-cpp-build.sh, cached outside
 * the repository), as a process the bench starts and stops: the comparison line of the trajectory scenario.
 * `start` launches it with the model and LoRA adapters (loaded, not applied: per-request `lora` picks them, in
 * the order given), waits for /health, and returns a handle whose `stop` ends it.
 */
export interface LlamaServerOptions {
  model: string;
  /** LoRA files; a request's `lora: [{id, scale}]` names them by their index here. */
  adapters: readonly string[];
  /** 0 picks a free port. */
  port?: number;
  /** Evaluation threads (`-t`): the bench's, so both engines compute with the same cores. */
  threads: number;
  /** Slots (`-np`) and the context they share (`-c`, split evenly between them). */
  slots?: number;
  contextSize?: number;
  extraArgs?: readonly string[];
  /** Folder of the built binaries; default: built (or found in the cache) by scripts/llama-cpp-build.sh. */
  binDir?: string;
}

export interface LlamaServer {
  readonly url: string;
  readonly pid: number;
  stop(): Promise<void>;
}

/** The folder holding llama-server: the build script builds it once per machine and prints the folder on its last line. */
export async function llamaServerBinDir(): Promise<string> {
  const { stdout } = await promisify(execFile)("bash", [join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), "llama-server"], { maxBuffer: 16 << 20 });
  return stdout.trim().split("\n").at(-1)!;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

export async function startLlamaServer(opts: LlamaServerOptions): Promise<LlamaServer> {
  const binDir = opts.binDir ?? (await llamaServerBinDir());
  const port = opts.port || (await freePort());
  const slots = opts.slots ?? 1;
  const args = [
    ...["-m", opts.model],
    // one --lora with the files comma-separated: llama-server keeps only the last of repeated --lora arguments
    ...(opts.adapters.length ? ["--lora", opts.adapters.join(",")] : []),
    "--lora-init-without-apply",
    ...["-t", String(opts.threads), "-np", String(slots), "-c", String((opts.contextSize ?? 8192) * slots)],
    // no prompt cache across slots in RAM: each slot's own cache is the whole reuse llama-server gets
    ...["--cache-ram", "0"],
    ...["--host", "127.0.0.1", "--port", String(port), "--no-webui"],
    ...(opts.extraArgs ?? []),
  ];
  const log = join(tmpdir(), `weact-llama-server-${process.pid}-${port}.log`);
  const fd = openSync(log, "w");
  const child: ChildProcess = spawn(join(binDir, "llama-server"), args, { stdio: ["ignore", fd, fd] });
  closeSync(fd);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    const done = await Promise.race([exited.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 100))]);
    if (done) throw new Error(`llama-server exited before it was ready; its log (${log}):\n${readFileSync(log, "utf8").slice(-2000)}`);
    const healthy = await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (healthy) break;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`llama-server was not healthy within 120 s; its log: ${log}`);
    }
  }
  const server: LlamaServer = {
    url,
    pid: child.pid!,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
  // every adapter loaded, in order: a request's lora ids would otherwise name other weights, or none
  const loaded = (await (await fetch(`${url}/lora-adapters`)).json()) as { id: number; path: string }[];
  if (loaded.length !== opts.adapters.length) {
    await server.stop();
    throw new Error(`llama-server loaded ${loaded.length} LoRA adapters of ${opts.adapters.length}: ${loaded.map((l) => l.path).join(", ")}`);
  }
  return server;
}
