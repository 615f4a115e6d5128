import { chmod, chown, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { randomUUID } from "node:crypto";
import { constants as osConstants, tmpdir } from "node:os";
import path from "node:path";
import { execa, type Result } from "execa";
import { buildCommand, RUN_MARKER_VAR, scriptName, type Language, type SandboxCommand } from "./sandboxCommand.js";
import type { IsolationInfo, IsolationLevel } from "./isolationTypes.js";
import { JailReaper } from "./jailReaper.js";
import { CappedOutput } from "./output.js";
import { killJail, killProcessGroup, killTagged } from "./processTree.js";

export type { Language } from "./sandboxCommand.js";

export interface RunCodeRequest {
  language: Language;
  code: string;
  stdin?: string;
  /** Wall-clock limit; defaults to `tools.runCode.defaultTimeoutS`, clamped to `tools.runCode.maxTimeoutS`. */
  timeoutS?: number;
}

export interface RunCodeLimits {
  defaultTimeoutS: number;
  maxTimeoutS: number;
  /** Python: RLIMIT_AS. JavaScript: RLIMIT_DATA plus V8's --max-old-space-size (see sandboxCommand.ts). */
  memoryMb: number;
  /** Kept per stream; the rest is drained and dropped. */
  maxOutputBytes: number;
  /** RLIMIT_FSIZE per file, and the size of the jail's /tmp. */
  maxFileMb: number;
  /** RLIMIT_NPROC, applied only where `isolation.enforces.processCount` (it counts a whole uid). */
  maxProcesses?: number;
}

export interface RunCodeOptions {
  isolation: IsolationInfo;
  limits: RunCodeLimits;
}

export interface RunCodeResult {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  /** The signal that ended the snippet (SIGKILL after a timeout, SIGABRT for a V8 out-of-memory abort, ...). */
  signal: string | null;
  durationMs: number;
  timedOut: boolean;
  truncated: { stdout: boolean; stderr: boolean };
  isolation: IsolationLevel;
}

export const DEFAULT_RUN_CODE_LIMITS: Readonly<RunCodeLimits> = Object.freeze({
  defaultTimeoutS: 10,
  maxTimeoutS: 60,
  memoryMb: 512,
  maxOutputBytes: 64 * 1024,
  maxFileMb: 64,
  // shared by all concurrent runs (one sandbox uid); node alone uses ~11 threads, which count too
  maxProcesses: 128,
});

/** The language has no working interpreter at the detected isolation level (e.g. no python3 on the host). */
export class RunCodeUnavailableError extends Error {
  override name = "RunCodeUnavailableError";
}

/** The request itself is unusable (a non-positive or non-finite timeout). */
export class RunCodeRequestError extends Error {
  override name = "RunCodeRequestError";
}

/** The sandbox could not be started at all (bwrap/prlimit vanished since detection, fork failed, ...). */
export class RunCodeSpawnError extends Error {
  override name = "RunCodeSpawnError";
}

/** After the main process exits, how long escaped descendants may hold its pipes before they are cut. */
const PIPE_GRACE_MS = 1_000;

/**
 * Runs one snippet in a fresh temp workdir under `options.isolation` and returns what happened.
 *
 * Anything the snippet does (syntax error, exception, crash, timeout, out of memory) is a result, never a
 * throw; the named errors above are for requests that cannot run at all. The run ends when the snippet's main
 * process exits or the wall-time limit passes; either way every process it started is killed and the workdir
 * removed before this resolves.
 */
export async function runCode(request: RunCodeRequest, options: RunCodeOptions): Promise<RunCodeResult> {
  const { isolation, limits } = options;
  const interpreter = isolation.interpreters[request.language];
  if (!interpreter) {
    throw new RunCodeUnavailableError(`${request.language} is not available at the ${isolation.level} isolation level`);
  }
  const timeoutS = resolveTimeout(request.timeoutS, limits);
  const workdir = await mkdtemp(path.join(tmpdir(), "weact-run-"));
  try {
    const script = path.join(workdir, scriptName(request.language));
    await writeFile(script, request.code);
    const drop = isolation.jail?.dropPrivileges;
    if (drop) {
      await chown(workdir, drop.uid, drop.gid);
      await chown(script, drop.uid, drop.gid);
    }
    const runId = randomUUID();
    const command = buildCommand(isolation, request.language, interpreter, { ...limits, timeoutS }, workdir, runId);
    return await execute(command, request.stdin, timeoutS, limits.maxOutputBytes, isolation, runId, workdir);
  } finally {
    await removeWorkdir(workdir);
  }
}

function resolveTimeout(requested: number | undefined, limits: RunCodeLimits): number {
  const timeoutS = requested ?? limits.defaultTimeoutS;
  if (!Number.isFinite(timeoutS) || timeoutS <= 0) {
    throw new RunCodeRequestError(`timeoutS must be a positive number of seconds, got ${timeoutS}`);
  }
  return Math.min(timeoutS, limits.maxTimeoutS);
}

async function execute(
  command: SandboxCommand,
  stdin: string | undefined,
  timeoutS: number,
  maxOutputBytes: number,
  isolation: IsolationInfo,
  runId: string,
  workdir: string,
): Promise<RunCodeResult> {
  const stdout = new CappedOutput(maxOutputBytes);
  const stderr = new CappedOutput(maxOutputBytes);
  const started = performance.now();
  const subprocess = execa(command.file, command.args, {
    cwd: command.cwd,
    env: command.env,
    extendEnv: false,
    // its own process group, so one kill(-pgid) reaches the children too (execa's timeout kills only the child)
    detached: true,
    buffer: false,
    reject: false,
    stripFinalNewline: false,
    ...(stdin === undefined ? { stdin: "ignore" as const } : { input: stdin }),
  });
  subprocess.stdout.on("data", (chunk: Buffer) => stdout.push(chunk));
  subprocess.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));

  const pgid = subprocess.pid;
  if (pgid !== undefined) liveGroups.add(pgid);
  const reaped = pgid !== undefined && isolation.jail?.dropPrivileges !== undefined;
  if (reaped) jailReaper.track(pgid, workdir);
  let timedOut = false;
  let lastResort: NodeJS.Timeout | undefined;
  const timer = setTimeout(() => {
    timedOut = true;
    if (pgid === undefined) return;
    if (isolation.jail) {
      void killJail(pgid);
      // should the jail not come down (it always has), the outer bwrap and with it the jail still go
      lastResort = setTimeout(() => killProcessGroup(pgid), PIPE_GRACE_MS);
    } else {
      endUnjailedTree(pgid, runId);
    }
  }, timeoutS * 1000);
  let pipeGrace: NodeJS.Timeout | undefined;
  subprocess.once("exit", () => {
    // in a jail the pid namespace dies with its init, which exits with the snippet; without one, leftovers are ours
    if (!isolation.jail && pgid !== undefined) endUnjailedTree(pgid, runId);
    // a descendant that escaped every kill would otherwise hold stdout open, and this run, forever
    pipeGrace = setTimeout(() => {
      subprocess.stdout.destroy();
      subprocess.stderr.destroy();
    }, PIPE_GRACE_MS);
  });

  let result: Result;
  try {
    result = await subprocess;
  } finally {
    clearTimeout(timer);
    clearTimeout(lastResort);
    clearTimeout(pipeGrace);
    if (pgid !== undefined) liveGroups.delete(pgid);
    if (reaped) jailReaper.release(pgid);
    if (!isolation.jail) await killTagged(RUN_MARKER_VAR, runId);
  }
  const durationMs = Math.round(performance.now() - started);
  if (pgid === undefined) {
    throw new RunCodeSpawnError(`could not start ${command.file}: ${result.shortMessage ?? "unknown error"}`, {
      cause: result.cause,
    });
  }
  const { exitCode, signal } = isolation.jail
    ? jailStatus(result)
    : { exitCode: result.exitCode ?? null, signal: result.signal ?? null };
  return {
    stdout: stdout.text(),
    stderr: stderr.text(),
    exitCode,
    signal,
    durationMs,
    timedOut,
    truncated: { stdout: stdout.truncated, stderr: stderr.truncated },
    isolation: isolation.level,
  };
}

/** Without a jail: the process group, then whatever left it but still carries the run's environment tag. */
function endUnjailedTree(pgid: number, runId: string): void {
  killProcessGroup(pgid);
  void killTagged(RUN_MARKER_VAR, runId);
}

/**
 * bwrap reports a jailed process killed by signal n as exit code 128+n; this maps it back so both levels report
 * signals alike. A snippet that itself calls exit(128+n) is reported as that signal too.
 */
function jailStatus(result: Result): { exitCode: number | null; signal: string | null } {
  if (result.signal !== undefined) return { exitCode: null, signal: result.signal };
  const code = result.exitCode ?? null;
  const signal =
    code !== null && code > 128
      ? Object.entries(osConstants.signals).find(([, number]) => number === code - 128)?.[0]
      : undefined;
  return signal ? { exitCode: null, signal } : { exitCode: code, signal: null };
}

/** Ends root's jails should the server die mid-run, however it dies (see jailReaper.ts). */
const jailReaper = new JailReaper();

/** Process groups of runs in flight: killed if the server exits mid-run (execa's cleanup skips detached children). */
const liveGroups = new Set<number>();
process.on("exit", () => {
  for (const pgid of liveGroups) killProcessGroup(pgid);
});

/** Removes the workdir even if the snippet left directories without write or search permission in it. */
async function removeWorkdir(workdir: string): Promise<void> {
  try {
    await rm(workdir, { recursive: true, force: true });
  } catch {
    await makeRemovable(workdir);
    await rm(workdir, { recursive: true, force: true });
  }
}

async function makeRemovable(dir: string): Promise<void> {
  await chmod(dir, 0o700);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await makeRemovable(path.join(dir, entry.name));
  }
}
