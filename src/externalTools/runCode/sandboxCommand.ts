import path from "node:path";
import type { IsolationInfo, Jail } from "./isolationTypes.js";

/** Where the per-call workdir appears inside the jail (a fixed path, so nothing about the host leaks). */
export const JAIL_WORKDIR = "/sandbox";

/** Names the environment variable that tags every process of one run at the rlimits level (see processTree.ts). */
export const RUN_MARKER_VAR = "WEACT_RUN_ID";

/** The limits one run is started under (already resolved from the request and the configured limits). */
export interface ProcessLimits {
  timeoutS: number;
  memoryMb: number;
  maxFileMb: number;
  maxProcesses?: number;
}

export interface SandboxCommand {
  file: string;
  args: string[];
  /** The spawned process's whole environment (never merged with the server's). */
  env: Record<string, string>;
  cwd: string;
}

export type Language = "python" | "javascript";

const SCRIPT_NAMES: Record<Language, string> = { python: "main.py", javascript: "main.js" };

export function scriptName(language: Language): string {
  return SCRIPT_NAMES[language];
}

/**
 * The command that runs `workdir/scriptName(language)` under `isolation`.
 *
 * Chain: [bwrap jail] -> [setpriv: drop root] -> prlimit -> interpreter. prlimit and setpriv exec in place, so
 * the interpreter is the jail's (or, without a jail, the spawned) process itself.
 */
export function buildCommand(
  isolation: IsolationInfo,
  language: Language,
  interpreter: string,
  limits: ProcessLimits,
  workdir: string,
  runId: string,
): SandboxCommand {
  const visibleWorkdir = isolation.jail ? JAIL_WORKDIR : workdir;
  const script = path.posix.join(visibleWorkdir, scriptName(language));
  const interpreterArgv =
    language === "python" ? [interpreter, script] : [interpreter, `--max-old-space-size=${limits.memoryMb}`, script];
  const limited = [
    isolation.prlimit,
    ...prlimitArgs(language, limits, isolation.enforces.processCount),
    "--",
    ...interpreterArgv,
  ];
  const env = sandboxEnv(visibleWorkdir, [interpreter, isolation.prlimit]);

  if (!isolation.jail) {
    return { file: limited[0]!, args: limited.slice(1), env: { ...env, [RUN_MARKER_VAR]: runId }, cwd: workdir };
  }
  const { jail } = isolation;
  const drop = jail.dropPrivileges;
  const inner = drop
    ? [
        drop.setpriv,
        `--reuid=${drop.uid}`,
        `--regid=${drop.gid}`,
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        ...limited,
      ]
    : limited;
  const args = [
    ...jailArgs(jail, limits),
    "--bind",
    workdir,
    JAIL_WORKDIR,
    "--chdir",
    JAIL_WORKDIR,
    "--clearenv",
    ...Object.entries(env).flatMap(([key, value]) => ["--setenv", key, value]),
    "--",
    ...inner,
  ];
  // bwrap gets no environment at all: --setenv is the snippet's whole environment.
  return { file: jail.bwrap, args, env: {}, cwd: workdir };
}

function prlimitArgs(language: Language, limits: ProcessLimits, enforceProcessCount: boolean): string[] {
  const mib = 1024 * 1024;
  // RLIMIT_AS would abort V8 at startup (it reserves far more address space than it uses); RLIMIT_DATA counts
  // only the private writable memory actually committed, which is what a hog grows.
  const memory = language === "python" ? `--as=${limits.memoryMb * mib}` : `--data=${limits.memoryMb * mib}`;
  const args = [
    memory,
    // a CPU backstop in case the wall-clock kill ever fails; SIGXCPU at the soft limit
    `--cpu=${Math.ceil(limits.timeoutS) + 1}`,
    `--fsize=${limits.maxFileMb * mib}`,
    "--core=0",
  ];
  if (enforceProcessCount && limits.maxProcesses !== undefined) args.push(`--nproc=${limits.maxProcesses}`);
  return args;
}

function jailArgs(jail: Jail, limits: ProcessLimits): string[] {
  const namespaces = jail.dropPrivileges
    ? // as root without a user namespace, so setpriv can switch to a real unprivileged uid (see isolation.ts)
      ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    : // a user namespace; its caps would otherwise widen the kernel surface the snippet can reach
      ["--unshare-all", "--cap-drop", "ALL"];
  // --as-pid-1: the snippet is the namespace's init, so its parent (pid 0) is outside and /proc shows no other
  // process, not even bwrap's reaper and its command line; when it exits, the kernel kills everything it left
  const args = [...namespaces, "--as-pid-1", "--die-with-parent", "--new-session"];
  for (const { path: link, target } of jail.symlinks) args.push("--symlink", target, link);
  const madeDirs = new Set<string>();
  for (const bound of jail.readOnlyPaths) {
    // bwrap copies the host's modes onto the directories it creates (e.g. /root 0700), which would hide a
    // bound interpreter from the unprivileged uid
    for (const ancestor of ancestorsOf(bound)) {
      if (madeDirs.has(ancestor)) continue;
      madeDirs.add(ancestor);
      args.push("--perms", "0755", "--dir", ancestor);
    }
    args.push("--ro-bind", bound, bound);
  }
  // after the binds, so the masks land on top of what a bound folder would show
  for (const mask of jail.masks ?? [])
    args.push(...(mask.kind === "dir" ? ["--tmpfs", mask.path] : ["--ro-bind", "/dev/null", mask.path]));
  const tmpBytes = limits.maxFileMb * 1024 * 1024;
  args.push("--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", String(tmpBytes), "--tmpfs", "/tmp");
  return args;
}

function ancestorsOf(dir: string): string[] {
  const ancestors: string[] = [];
  for (let parent = path.dirname(dir); parent !== "/"; parent = path.dirname(parent)) ancestors.unshift(parent);
  return ancestors;
}

function sandboxEnv(home: string, binaries: string[]): Record<string, string> {
  const binDirs = [...new Set([...binaries.map((binary) => path.dirname(binary)), "/usr/bin", "/bin"])];
  return {
    PATH: binDirs.join(":"),
    HOME: home,
    TMPDIR: home,
    LANG: "C.UTF-8",
    LC_ALL: "C.UTF-8",
    PYTHONDONTWRITEBYTECODE: "1",
    // unbuffered, so what a snippet printed before it was killed still reaches the result
    PYTHONUNBUFFERED: "1",
    PYTHONNOUSERSITE: "1",
    PYTHONIOENCODING: "utf-8",
    NO_COLOR: "1",
  };
}
