import { constants, existsSync, realpathSync } from "node:fs";
import { lstat, open, readlink, realpath, type FileHandle } from "node:fs/promises";
import { dirname, resolve, sep } from "node:path";
import { fileKind } from "../gguf/index.js";
import { AdapterPathError, type PathField } from "./errors.js";

/**
 * The file is one of the folders or inside one, after resolving `..` and symlinks (of the file and of the
 * folders, where they exist): a path cannot escape by a `..` segment, a symlink, or a sibling folder that
 * only shares a prefix ("/lib" does not contain "/library/x"). A check of names only: what the server reads, it opens
 * with `openInside`.
 */
export function isInsideDirs(filePath: string, dirs: readonly string[]): boolean {
  const real = existsSync(filePath) ? realpathSync(filePath) : resolve(filePath);
  return dirs.some((dir) => within(real, existsSync(dir) ? realpathSync(dir) : resolve(dir)));
}

const within = (real: string, root: string) => real === root || real.startsWith(root + sep);

/** An adapter file opened inside the adapter folders, checked on its descriptor. The caller closes `handle`. */
export interface ConfinedFile {
  handle: FileHandle;
  /** The path as the entry gave it, resolved: what messages name. */
  path: string;
  /** Where the opened file is: its real path, inside the folders. */
  realPath: string;
  size: number;
}

/*
 * O_NOFOLLOW: the final name is not followed, so a symlink put there after the real path was resolved fails the open.
 * O_NONBLOCK: a FIFO must not hold the open waiting for a writer. O_NOCTTY: a terminal never becomes the server's.
 */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/**
 * Opens an adapter file only if what is opened is a regular file inside one of `dirs`, and returns the descriptor:
 * everything after (the GGUF checks, the hash, the copy llama.cpp loads) reads that descriptor, never the name again.
 * The name is resolved (symlinks inside the folders are fine), the real path is checked and opened without following
 * a link, and the opened file is then shown to be the one at that real path (the kernel's name for the descriptor,
 * `/proc/self/fd`), so a symlink or a folder swapped in between the check and the open is refused, not read.
 */
export async function openInside(filePath: string, dirs: readonly string[], field: PathField): Promise<ConfinedFile> {
  const path = resolve(filePath);
  const roots = await Promise.all(dirs.map((dir) => realpath(dir).catch(() => resolve(dir))));
  const outside = () =>
    new AdapterPathError(
      "adapter_outside",
      field,
      path,
      `is outside the adapter folders (${dirs.join(", ")})`,
      "set adapters.allowedDirs to allow another folder",
    );
  let realPath: string;
  try {
    realPath = await realpath(path);
  } catch (err) {
    // a name that does not resolve: outside the folders by its own words is refused as outside, else as missing
    if (!roots.some((root) => within(path, root))) throw outside();
    throw pathError(err, field, path, "resolving");
  }
  if (!roots.some((root) => within(realPath, root))) throw outside();
  let handle: FileHandle;
  try {
    handle = await open(realPath, OPEN_FLAGS);
  } catch (err) {
    throw pathError(err, field, path, "opening");
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile())
      throw new AdapterPathError(
        "adapter_not_regular",
        field,
        path,
        `is ${fileKind(stats)}, not a regular file`,
        field === "file" ? "an adapter must be a GGUF file" : "a PEFT folder holds regular files",
      );
    // a hard link is the same file under a second name: /proc names the one inside the folder, whatever it links
    // no name left: replaced since it was opened
    if (stats.nlink === 0) throw changed(field, path);
    if (stats.nlink > 1)
      throw new AdapterPathError(
        "adapter_not_regular",
        field,
        path,
        `has ${stats.nlink} names (hard links): it may be a file from outside the adapter folders`,
        "copy the file into the adapter folder instead of linking it",
      );
    if (!(await openedAt(handle, realPath, stats))) throw changed(field, path);
    return { handle, path, realPath, size: stats.size };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/**
 * Whether the descriptor is the file at `realPath`. Linux names an open file in /proc/self/fd: a folder on the path
 * swapped for a symlink before the open, or the name moved or replaced since, gives another name there. Without
 * /proc, the folders of the real path are checked to be no symlinks and the name to hold the same inode.
 */
async function openedAt(handle: FileHandle, realPath: string, stats: { dev: number; ino: number }): Promise<boolean> {
  const named = await readlink(`/proc/self/fd/${handle.fd}`).catch(() => undefined);
  if (named !== undefined) return named === realPath;
  try {
    for (let dir = dirname(realPath); dir !== dirname(dir); dir = dirname(dir))
      if ((await lstat(dir)).isSymbolicLink()) return false;
    const now = await lstat(realPath);
    return now.dev === stats.dev && now.ino === stats.ino;
  } catch {
    return false;
  }
}

const changed = (field: PathField, path: string) =>
  new AdapterPathError(
    "adapter_changed",
    field,
    path,
    "changed while the server opened it (a symbolic link or a folder was swapped in on its path)",
    "leave it in place while it is registered, then call again",
  );

/** A file system error as a coded refusal: its meaning in words, never the errno's name or what the file held. */
function pathError(err: unknown, field: PathField, path: string, step: "resolving" | "opening"): AdapterPathError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "ENOENT" || code === "ENOTDIR") {
    // it resolved a moment ago: it was moved or replaced in between
    if (step === "opening") return changed(field, path);
    return new AdapterPathError(
      "adapter_missing",
      field,
      path,
      "does not exist",
      "give the path of a file inside the adapter folders, relative to the manifest's folder or absolute",
    );
  }
  if (code === "ELOOP") {
    // the real path had no link left: one was put there after it was resolved
    if (step === "opening") return changed(field, path);
    return new AdapterPathError(
      "adapter_symlink_loop",
      field,
      path,
      "is a loop of symbolic links",
      "point the link at a file inside the adapter folders",
    );
  }
  // a name that stopped being a link while it was read as one
  if (code === "EINVAL") return changed(field, path);
  return new AdapterPathError(
    "adapter_unreadable",
    field,
    path,
    `cannot be read (${ERRNO_WORDS[code ?? ""] ?? "the file system refused it"})`,
    "make it readable by the server's user",
  );
}

const ERRNO_WORDS: Record<string, string> = {
  EACCES: "permission denied",
  EPERM: "permission denied",
  ENAMETOOLONG: "its path is too long",
  EMFILE: "the server has too many files open",
  ENFILE: "the system has too many files open",
  EIO: "an input/output error",
  EISDIR: "it is a folder",
};
