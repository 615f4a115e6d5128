import { lstat, readlink, realpath } from "node:fs/promises";
import path from "node:path";
import { findExecutable, resolvePython, type PythonInstall } from "./hostTools.js";
import { DEFAULT_RUN_CODE_LIMITS, runCode, type Language } from "./runCode.js";

import type { IsolationInfo, Jail } from "./isolationTypes.js";
export type { Enforcement, IsolationInfo, IsolationLevel, Jail } from "./isolationTypes.js";

/** Not even the rlimits level is possible (no prlimit): the runner must not run code at all. */
export class IsolationUnavailableError extends Error {
  override name = "IsolationUnavailableError";
}

export interface DetectIsolationOptions {
  /** false: go straight to the rlimits level (to compare levels, or where a jail is unwanted). Default true. */
  allowBubblewrap?: boolean;
}

const cache = new Map<boolean, Promise<IsolationInfo>>();

/** Probes once per process (per option set) which level works here, by running real snippets under it. */
export function detectIsolation(options: DetectIsolationOptions = {}): Promise<IsolationInfo> {
  const allowBubblewrap = options.allowBubblewrap ?? true;
  let detected = cache.get(allowBubblewrap);
  if (!detected) {
    detected = probe(allowBubblewrap);
    cache.set(allowBubblewrap, detected);
    // a failed probe (e.g. a transient fork failure) may be retried by the next caller
    detected.catch(() => cache.delete(allowBubblewrap));
  }
  return detected;
}

/** The uid/gid a root server drops the jail to: the kernel's overflow ("nobody") ids, owning nothing. */
const SANDBOX_ID = 65534;

const SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

interface Host {
  prlimit: string;
  javascript: string;
  python?: PythonInstall;
}

async function probe(allowBubblewrap: boolean): Promise<IsolationInfo> {
  const prlimit = await findExecutable("prlimit");
  if (!prlimit)
    throw new IsolationUnavailableError("prlimit (util-linux) not found: no resource limits can be enforced");
  const host: Host = { prlimit, javascript: await realpath(process.execPath), python: await resolvePython() };
  let jailFailure = "bubblewrap not requested";
  if (allowBubblewrap) {
    const jailed = await tryBubblewrap(host);
    if (typeof jailed !== "string") return jailed;
    jailFailure = jailed;
  }
  return tryRlimits(host, jailFailure);
}

/** The bubblewrap level if a jail really works here, else why not. */
async function tryBubblewrap(host: Host): Promise<IsolationInfo | string> {
  const bwrap = await findExecutable("bwrap");
  if (!bwrap) return "bwrap not found";
  const setpriv = process.getuid?.() === 0 ? await findExecutable("setpriv") : undefined;
  const jail: Jail = {
    bwrap,
    readOnlyPaths: await readOnlyPaths(host, setpriv),
    symlinks: await systemSymlinks(),
    ...(setpriv ? { dropPrivileges: { setpriv, uid: SANDBOX_ID, gid: SANDBOX_ID } } : {}),
  };
  const candidate: IsolationInfo = {
    level: "bubblewrap",
    detail: "",
    interpreters: { javascript: host.javascript, ...(host.python ? { python: host.python.executable } : {}) },
    enforces: { filesystem: true, network: true, processCount: setpriv !== undefined },
    prlimit: host.prlimit,
    jail,
  };
  const probed = await runProbe(candidate, "javascript", JAIL_PROBE);
  if (!probed.ok) return `bwrap failed: ${probed.reason}`;
  let report: { uid: number; interfaces: string[] };
  try {
    report = JSON.parse(probed.stdout) as typeof report;
  } catch {
    return `unexpected probe output: ${probed.stdout.slice(0, 200)}`;
  }
  const { uid, interfaces } = report;
  if (interfaces.some((name) => name !== "lo")) return `network not isolated (interfaces: ${interfaces.join(", ")})`;
  if (jail.dropPrivileges && uid !== SANDBOX_ID) return `privilege drop failed (uid ${uid})`;
  const pythonProblem = await dropBrokenPython(candidate);
  candidate.detail = bubblewrapDetail(candidate, pythonProblem);
  return candidate;
}

async function tryRlimits(host: Host, jailFailure: string): Promise<IsolationInfo> {
  const candidate: IsolationInfo = {
    level: "rlimits",
    detail: "",
    interpreters: { javascript: host.javascript, ...(host.python ? { python: host.python.executable } : {}) },
    enforces: { filesystem: false, network: false, processCount: false },
    prlimit: host.prlimit,
  };
  const probed = await runProbe(candidate, "javascript", "");
  if (!probed.ok) throw new IsolationUnavailableError(`node does not run under prlimit: ${probed.reason}`);
  const pythonProblem = await dropBrokenPython(candidate);
  candidate.detail = rlimitsDetail(jailFailure, pythonProblem);
  return candidate;
}

/**
 * `isolation` with the server's own files hidden from the jail: each existing path under a folder the jail binds
 * is masked. Paths outside every bound folder are invisible anyway (and masking them would show their names).
 */
export async function hidingPaths(isolation: IsolationInfo, paths: readonly string[]): Promise<IsolationInfo> {
  const jail = isolation.jail;
  if (!jail) return isolation;
  const masks: NonNullable<Jail["masks"]> = [];
  const reals = await Promise.all([...new Set(paths)].map((p) => realpath(p).catch(() => undefined)));
  // outer folders first: what lies inside a masked folder is hidden with it
  for (const real of reals.filter((r): r is string => Boolean(r) && r !== "/").sort((a, b) => a.length - b.length)) {
    const under = (dir: string) => real === dir || real.startsWith(`${dir}/`);
    if (!jail.readOnlyPaths.some(under) || masks.some((m) => under(m.path))) continue;
    const stats = await lstat(real);
    masks.push({ path: real, kind: stats.isDirectory() ? "dir" : "file" });
  }
  return { ...isolation, jail: { ...jail, masks } };
}

/** Run inside the candidate jail: who am I, and which network interfaces exist (an own netns has only lo). */
const JAIL_PROBE = `console.log(JSON.stringify({ uid: process.getuid(), interfaces: Object.keys(require("node:os").networkInterfaces()) }))`;

/** Removes python from the candidate if it does not run there; returns why, for the detail. */
async function dropBrokenPython(candidate: IsolationInfo): Promise<string | undefined> {
  if (!candidate.interpreters.python) return "python3 not found on the host";
  const probed = await runProbe(candidate, "python", "");
  if (probed.ok) return undefined;
  delete candidate.interpreters.python;
  return `python3 does not run at this level: ${probed.reason}`;
}

type ProbeOutcome = { ok: true; stdout: string } | { ok: false; reason: string };

/** Runs a probe snippet through the real runner, so what is verified is exactly what later runs use. */
async function runProbe(candidate: IsolationInfo, language: Language, code: string): Promise<ProbeOutcome> {
  try {
    const result = await runCode(
      { language, code, timeoutS: 20 },
      { isolation: candidate, limits: DEFAULT_RUN_CODE_LIMITS },
    );
    if (result.exitCode === 0) return { ok: true, stdout: result.stdout };
    const tail = result.stderr.trim().split("\n").slice(-3).join(" | ");
    return { ok: false, reason: `exit ${result.exitCode ?? result.signal}: ${tail}` };
  } catch (error) {
    return { ok: false, reason: (error as Error).message };
  }
}

/** System dirs plus install roots not already under one; nested paths are dropped (bwrap binds recursively). */
async function readOnlyPaths(host: Host, setpriv: string | undefined): Promise<string[]> {
  const systemDirs: string[] = [];
  for (const dir of SYSTEM_DIRS) {
    if ((await lstat(dir).catch(() => undefined))?.isDirectory()) systemDirs.push(dir);
  }
  const extra = [
    installRoot(host.javascript),
    host.python?.prefix,
    host.python && path.dirname(host.python.executable),
    path.dirname(host.prlimit),
    setpriv && path.dirname(setpriv),
  ].filter((dir): dir is string => Boolean(dir) && dir !== "/");
  const kept: string[] = [];
  for (const dir of [...systemDirs, ...extra].sort((a, b) => a.length - b.length)) {
    if (!kept.some((outer) => dir === outer || dir.startsWith(`${outer}/`))) kept.push(dir);
  }
  return kept;
}

/** bin/'s parent (node's lib/ may hold what it loads), unless that is / itself. */
function installRoot(binary: string): string {
  const prefix = path.dirname(path.dirname(binary));
  return prefix === "/" ? path.dirname(binary) : prefix;
}

async function systemSymlinks(): Promise<Jail["symlinks"]> {
  const links: Jail["symlinks"] = [];
  for (const dir of SYSTEM_DIRS) {
    if ((await lstat(dir).catch(() => undefined))?.isSymbolicLink())
      links.push({ path: dir, target: await readlink(dir) });
  }
  return links;
}

function bubblewrapDetail(info: IsolationInfo, pythonProblem: string | undefined): string {
  const drop = info.jail?.dropPrivileges;
  return [
    "bubblewrap jail (own mount, pid, network, ipc and uts namespaces; the snippet is its pid namespace's init, so /proc shows no other process).",
    `Visible read-only: ${info.jail?.readOnlyPaths.join(", ")}; read-write: only the per-call workdir (at /sandbox);`,
    "/tmp is a small private tmpfs; no /etc, /home or other host files. No network (own loopback only).",
    drop
      ? `Runs as uid/gid ${drop.uid} with no capabilities; RLIMIT_NPROC is enforced (shared by all concurrent runs).`
      : "Runs as the server's uid in a user namespace, without capabilities; RLIMIT_NPROC is not applied (it would count all of that uid's processes).",
    "Enforced with prlimit: memory (python RLIMIT_AS, node RLIMIT_DATA + V8 heap cap), CPU backstop, file size.",
    "The whole process tree dies with the jail on exit or timeout. Environment: minimal, nothing inherited.",
    ...(pythonProblem ? [pythonProblem] : []),
  ].join(" ");
}

function rlimitsDetail(jailFailure: string, pythonProblem: string | undefined): string {
  return [
    `No jail (${jailFailure}).`,
    "Enforced: prlimit memory (python RLIMIT_AS, node RLIMIT_DATA + V8 heap cap), CPU backstop and file size;",
    "a minimal environment (nothing inherited); a temp workdir as cwd; on exit or timeout the process group and",
    "every process carrying the run's environment tag are killed.",
    "NOT enforced: the snippet can read and write any file the server's user can and use the network;",
    "a descendant that starts a new session with a scrubbed environment can outlive the run;",
    "RLIMIT_NPROC is not applied (it would count all of the server uid's processes, and root ignores it).",
    ...(pythonProblem ? [pythonProblem] : []),
  ].join(" ");
}
