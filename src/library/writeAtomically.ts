import { randomBytes } from "node:crypto";
import { mkdirSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/**
 * Runs `write` on a temporary path beside `file` and renames it into place: a reader (a server loading the library)
 * sees the old file or the whole new one, and on any failure nothing is left behind.
 */
export function writeAtomically(file: string, write: (tmp: string) => void): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = join(dirname(file), `.${basename(file)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  try {
    write(tmp);
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}
