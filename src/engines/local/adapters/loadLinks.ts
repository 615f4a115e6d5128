import { lstatSync, readdirSync, rmSync } from "node:fs";
import { lstat, mkdir, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { leftOver, privateFolderProblem, RUN_NONCE } from "../../../privateFolder.js";

/*
 * Where a version is loaded through a link of its own: node-llama-cpp caches adapters by path, so new bytes at a path
 * another version holds need another path. A link, never a copy: copying a large file held the event loop for
 * seconds. llama.cpp reads the bytes once, so the link goes as soon as they are resident.
 *
 * The links live in a folder of this user's own (named by uid, mode 0700, checked before each use, never trusted
 * because it exists): in a folder others can write, anyone could swap a link for a file of their own between its
 * making and its load, and the server would serve their weights under a version id it verified.
 *
 * A link is named by the server's pid and a nonce of its own: those of a server killed while loading are swept at the
 * next start, also when the new server got the same pid (as in a restarted container).
 */
const LINK_NAME = /^(\d+)-([0-9a-f]+)-\d+-[0-9a-f]+\.gguf$/;
let links = 0;

/** This user's folder of load links (read at each use: the temporary folder is the environment's). */
export function loadLinkDir(): string {
  return join(tmpdir(), `weact-adapters-${process.getuid!()}`);
}

/**
 * A new link to `filePath` in this user's private folder (made 0700 if missing). Refused, with the reason, when
 * that folder is not private: removing it is the fix (the server makes it again), using it would trust another user.
 */
export async function linkForLoading(
  filePath: string,
  sha256: string,
): Promise<{ path: string } | { refused: string }> {
  const dir = loadLinkDir();
  try {
    await mkdir(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST")
      return { refused: `cannot make the folder ${dir} to load it through: ${(err as Error).message}` };
  }
  const unsafe = privateFolderProblem(await lstat(dir));
  if (unsafe)
    return {
      refused: `the folder it is loaded through, ${dir}, ${unsafe}; it must be a directory of this user's only (mode 0700): remove it and the server makes it again`,
    };
  const path = join(dir, `${process.pid}-${RUN_NONCE}-${++links}-${sha256}.gguf`);
  await symlink(filePath, path);
  return { path };
}

/**
 * Removes the load links of servers no longer running, and this pid's of an earlier server (another nonce). Never
 * fails: a link it cannot remove stays for a later start, and a folder that is not private is left alone.
 */
export function sweepStaleLinks(): void {
  const dir = loadLinkDir();
  let names: string[];
  try {
    if (privateFolderProblem(lstatSync(dir))) return;
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const [, pidText, nonce] = LINK_NAME.exec(name) ?? [];
    if (!leftOver(pidText, nonce)) continue;
    try {
      rmSync(join(dir, name), { force: true });
    } catch {
      // not ours to remove (a folder another process made unwritable): the load does not depend on it
    }
  }
}
