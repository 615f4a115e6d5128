import type { Stats } from "node:fs";

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
