import { readdir, readFile } from "node:fs/promises";

/** SIGKILLs a process group. Runs in timers and exit handlers, so a group already gone is silently fine. */
export function killProcessGroup(pgid: number): void {
  killQuietly(-pgid);
}

/**
 * Ends a jailed run by SIGKILLing the jail's pid-namespace init (the one child of the outer bwrap).
 *
 * The kernel then kills every process in the namespace and the dying init reaps them; the outer bwrap reaps
 * the init and exits. Killing the outer bwrap instead would also end the jail (--die-with-parent), but would
 * leave the init to be reaped by the host's pid 1, which in some containers never reaps. Before the jail is
 * set up there is no init yet, so the outer bwrap's group is killed.
 */
export async function killJail(bwrapPid: number): Promise<void> {
  const inits = await jailInits(bwrapPid);
  if (inits.length === 0) killProcessGroup(bwrapPid);
  for (const pid of inits) killQuietly(pid);
}

/** The jail's pid-namespace init(s): the children of the outer bwrap. */
export async function jailInits(parent: number): Promise<number[]> {
  return pidsWhose("stat", (stat) => {
    // fields after the parenthesised command (which may contain spaces): state, ppid, ...
    const text = stat.toString("utf8");
    return Number(text.slice(text.lastIndexOf(")") + 2).split(" ")[1]) === parent;
  });
}

/**
 * The processes whose mount table binds `workdir` at `mountPoint`: a jail's processes, found by the folder only
 * its run has, even after the outer bwrap is gone and the jail's init was re-parented (so `jailInits` no longer
 * sees it). A mount's root is the bound folder's path inside its filesystem, so the folder's own name, unique
 * per run (mkdtemp), is what is compared.
 */
export async function pidsBinding(workdir: string, mountPoint: string): Promise<number[]> {
  const suffix = `/${workdir.slice(workdir.lastIndexOf("/") + 1)}`;
  return pidsWhose("mountinfo", (mounts) =>
    // fields: id, parent id, major:minor, root, mount point, ...
    mounts
      .toString("utf8")
      .split("\n")
      .some((line) => {
        const [, , , root, point] = line.split(" ");
        return point === mountPoint && root !== undefined && root.endsWith(suffix);
      }),
  );
}

/**
 * SIGKILLs every process whose initial environment carries `name=value`.
 *
 * Without a jail this is how the runner reaches descendants that left the process group (setsid, double fork):
 * they inherit the tag. It repeats until a scan finds nothing, because a process may fork between scan and kill.
 * A descendant that exec'd with a scrubbed environment is not found: the rlimits level documents this.
 */
export async function killTagged(name: string, value: string): Promise<void> {
  const needle = Buffer.from(`\0${name}=${value}\0`);
  for (let round = 0; round < 10; round += 1) {
    const pids = await taggedPids(needle);
    if (pids.length === 0) return;
    for (const pid of pids) killQuietly(pid);
  }
}

function taggedPids(needle: Buffer): Promise<number[]> {
  // a leading NUL makes the first variable matchable like the others
  return pidsWhose("environ", (environ) => Buffer.concat([Buffer.from([0]), environ]).includes(needle));
}

/** The pids whose `/proc/<pid>/<file>` satisfies `test`; a process that exits, or is not ours to read, is skipped. */
async function pidsWhose(file: string, test: (content: Buffer) => boolean): Promise<number[]> {
  const found: number[] = [];
  for (const pid of await pidsOnHost()) {
    try {
      if (test(await readFile(`/proc/${pid}/${file}`))) found.push(pid);
    } catch {
      // exited while scanning, or not ours to read
    }
  }
  return found;
}

/** All pids, or none where /proc is unreadable (the sweeps are then skipped; killJail falls back to the group). */
async function pidsOnHost(): Promise<number[]> {
  const entries = await readdir("/proc").catch(() => []);
  return entries.map(Number).filter((pid) => Number.isInteger(pid) && pid !== process.pid);
}

/** SIGKILL to a pid (negative: a group); ESRCH, the usual failure, just means it already exited. */
function killQuietly(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}
