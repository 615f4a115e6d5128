import { openSync, readFileSync, rmSync, writeSync, closeSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "../log.js";
import { processAlive } from "../processAlive.js";

const POLL_MS = 500;

/** The pid in a lock file, or undefined when it is gone or holds no pid yet (its writer is between open and write). */
function holder(lock: string): number | undefined {
  try {
    const pid = Number(readFileSync(lock, "utf8"));
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Runs `fn` while holding `lock` (a file created exclusively, holding the pid), so that two fetches of one model,
 * from parallel test files say, download it once: the second waits and then finds it cached. A lock whose process
 * died is taken over. Correctness does not rest on the lock: each fetch writes its own temporary file and renames
 * a verified one into place, so a lock broken by a race costs a second download, never a corrupt model.
 */
export async function withFileLock<T>(lock: string, logger: Logger, fn: () => Promise<T>): Promise<T> {
  let waiting = false;
  for (;;) {
    try {
      const fd = openSync(lock, "wx");
      try {
        writeSync(fd, String(process.pid));
      } finally {
        closeSync(fd);
      }
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const pid = holder(lock);
    // a pid of this machine: the cache is a local folder
    if (pid !== undefined && !processAlive(pid)) {
      rmSync(lock, { force: true });
      continue;
    }
    if (!waiting) logger.info({ lock, pid }, "another fetch of this model is running: waiting for it");
    waiting = true;
    await sleep(POLL_MS);
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}
