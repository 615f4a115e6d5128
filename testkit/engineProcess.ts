import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";

/**
 * A serving engine (llama-server, vLLM) started as a child process on loopback for the tests and the benchmarks,
 * ready once its health route answers. Its process group is stopped as a whole: vLLM runs its engine core and
 * workers as child processes, which must not outlive the test that started them.
 */
export interface EngineProcess {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  /** The exact arguments it was started with (what a README command must say). */
  readonly args: readonly string[];
  /** Its stderr and stdout so far (the engines log there). */
  log(): string;
  /** SIGSTOP: the processes stay, answer nothing (a slow or hung engine). */
  pause(): void;
  /** SIGCONT after pause. */
  resume(): void;
  /** SIGTERM to the group, waits for the exit (SIGKILL after `killAfterMs`). */
  stop(): Promise<void>;
}

export interface SpawnEngineOptions {
  /** Names the engine in errors. */
  label: string;
  command: string;
  args: readonly string[];
  port: number;
  env?: NodeJS.ProcessEnv;
  /** GET path that answers 2xx once the engine serves. */
  healthPath: string;
  startTimeoutMs: number;
  /** Grace period between SIGTERM and SIGKILL on stop (default 30 s). */
  killAfterMs?: number;
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

/** Starts the engine in its own process group and resolves once `healthPath` answers, or throws with its log. */
export async function spawnEngine(opts: SpawnEngineOptions): Promise<EngineProcess> {
  const child: ChildProcess = spawn(opts.command, opts.args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: opts.env ?? process.env,
    detached: true,
  });
  let log = "";
  const append = (d: Buffer) => void (log = (log + d.toString()).slice(-200_000));
  child.stdout!.on("data", append);
  child.stderr!.on("data", append);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const running = () => child.exitCode === null && child.signalCode === null;
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, sig);
    } catch {
      // the group is gone already
    }
  };
  const url = `http://127.0.0.1:${opts.port}`;
  const deadline = Date.now() + opts.startTimeoutMs;
  for (;;) {
    if (!running())
      throw new Error(
        `${opts.label} exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${log.slice(-4000)}`,
      );
    const healthy = await fetch(`${url}${opts.healthPath}`, { signal: AbortSignal.timeout(1000) })
      .then((r) => r.ok)
      .catch(() => false);
    if (healthy) break;
    if (Date.now() > deadline) {
      signal("SIGKILL");
      throw new Error(
        `${opts.label} did not answer ${opts.healthPath} within ${opts.startTimeoutMs} ms:\n${log.slice(-4000)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    url,
    port: opts.port,
    pid: child.pid!,
    args: opts.args,
    log: () => log,
    pause: () => signal("SIGSTOP"),
    resume: () => signal("SIGCONT"),
    stop: async () => {
      if (!running()) return;
      signal("SIGCONT"); // a paused process would never handle the SIGTERM
      signal("SIGTERM");
      const killer = setTimeout(() => signal("SIGKILL"), opts.killAfterMs ?? 30_000);
      await exited;
      clearTimeout(killer);
      // the engine's own children (vLLM's engine core) go with it
      signal("SIGKILL");
    },
  };
}
