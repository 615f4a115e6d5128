import { rm } from "node:fs/promises";
import { createInterface } from "node:readline";
import { JAIL_WORKDIR } from "./sandboxCommand.js";
import { jailInits, killJail, pidsBinding } from "./processTree.js";

/**
 * The watcher of jailReaper.ts: reads `+<bwrap pid> <workdir>` and `-<bwrap pid>` lines from the server; at
 * end of input, ends every jail still tracked and removes its workdir.
 */
const live = new Map<number, { workdir: string; inits: Set<number> }>();

async function learnInits(bwrapPid: number): Promise<void> {
  // the init appears a few milliseconds after bwrap starts (seconds on a loaded machine); learnt early, it is
  // still known once bwrap is gone
  while (live.has(bwrapPid)) {
    const run = live.get(bwrapPid)!;
    for (const pid of await jailInits(bwrapPid)) run.inits.add(pid);
    if (run.inits.size > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  const pid = Number.parseInt(line.slice(1), 10);
  if (line.startsWith("+")) {
    live.set(pid, { workdir: line.slice(line.indexOf(" ") + 1), inits: new Set() });
    void learnInits(pid);
  } else {
    live.delete(pid);
  }
});
lines.on("close", async () => {
  for (const [bwrapPid, { workdir, inits }] of live) {
    for (const pid of inits) kill(pid);
    // the server may die before the init was learnt (this watcher starts with the first run, and a loaded
    // machine starts it late): the jail's processes are then found by the workdir their mount table binds
    if (inits.size === 0) for (const pid of await pidsBinding(workdir, JAIL_WORKDIR)) kill(pid);
    await killJail(bwrapPid);
    await rm(workdir, { recursive: true, force: true }).catch(() => undefined);
  }
  process.exit(0);
});

function kill(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}
