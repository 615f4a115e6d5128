import { access, realpath } from "node:fs/promises";
import { constants } from "node:fs";
import path from "node:path";
import { execa } from "execa";

/** System directories searched when the server has no PATH at all (a service manager may start us without one). */
const SYSTEM_BIN_DIRS = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/**
 * The real (symlink-free) path of an executable on PATH, or undefined. Real paths, because a jail binds them.
 * Only PATH is searched when it is set: the operator decides which tools the server uses (and can withhold one).
 */
export async function findExecutable(name: string): Promise<string | undefined> {
  const onPath = (process.env.PATH ?? "").split(path.delimiter).filter(Boolean);
  const dirs = onPath.length ? onPath : SYSTEM_BIN_DIRS;
  for (const dir of dirs) {
    const candidate = path.join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return await realpath(candidate);
    } catch {
      // not here, keep looking
    }
  }
  return undefined;
}

export interface PythonInstall {
  /** The real interpreter binary (a pyenv/asdf shim would need its shell tooling and HOME inside a jail). */
  executable: string;
  /** Where its standard library lives (sys.base_prefix): a jail must bind it. */
  prefix: string;
}

/** Asks python3 itself where it lives; the shim only works with the server's own environment, so this does. */
export async function resolvePython(): Promise<PythonInstall | undefined> {
  const result = await execa(
    "python3",
    ["-c", "import os, sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix)"],
    { reject: false, timeout: 10_000 },
  );
  const [executable, prefix] = result.exitCode === 0 ? String(result.stdout).split("\n") : [];
  return executable && prefix ? { executable, prefix } : undefined;
}
