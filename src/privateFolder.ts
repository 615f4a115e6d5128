import { randomBytes } from "node:crypto";
import type { Stats } from "node:fs";
import { processAlive } from "./processAlive.js";

/**
 * Why `stats` (an lstat) is no folder to keep the server's private files in (adapter copies, load links): not a
 * directory of this user's that only this user can open. Undefined when it is one.
 */
export function privateFolderProblem(stats: Stats): string | undefined {
  if (stats.isSymbolicLink()) return "is a symbolic link";
  if (!stats.isDirectory()) return "is not a directory";
  if (stats.uid !== process.getuid!()) return `belongs to uid ${stats.uid}`;
  // what matters is that no one else may list, enter or write it (a umask may leave fewer owner bits than 0700)
  if (stats.mode & 0o077) return `is open to other users (mode ${(stats.mode & 0o777).toString(8)})`;
  return undefined;
}

/** This run of the server, in the names it gives its private files (`<pid>-<RUN_NONCE>-...`). */
export const RUN_NONCE = randomBytes(4).toString("hex");

/**
 * Whether a private file named `<pid>-<nonce>-...` is a leftover: made by a process that is gone, or by an earlier
 * run that had this process's pid.
 */
export function leftOver(pidText: string | undefined, nonce: string | undefined): boolean {
  const pid = Number(pidText);
  return pid === process.pid ? nonce !== RUN_NONCE : pid > 0 && !processAlive(pid);
}
