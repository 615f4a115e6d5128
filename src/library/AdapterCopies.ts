import { createHash } from "node:crypto";
import { rmSync } from "node:fs";
import { lstat, mkdir, open, readdir, rename, rm, statfs, type FileHandle } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { ConfinedFile } from "./confine.js";
import { AdapterPathError, type PathField } from "./errors.js";
import { leftOver, privateFolderProblem, RUN_NONCE } from "../privateFolder.js";

/*
 * What llama.cpp (or a remote engine's PEFT export) loads is the server's own copy of an adapter file, made from the
 * descriptor the folder check opened and named by the SHA-256 computed while copying: the bytes checked, hashed and
 * loaded are one and the same, whatever happens to the library folder meanwhile (a symlink swapped in, the file
 * rewritten in place).
 *
 * The copies live in a folder of this user's own under the temporary folder (`weact-adapter-copies-<uid>`, mode 0700,
 * checked before each use, never trusted because it exists), one folder per library named by the server's pid and a
 * nonce: removed when the process exits, and those of a server killed before are removed at the next start.
 */
const FOLDER_NAME = /^(\d+)-([0-9a-f]+)-\d+$/;
const CHUNK = 4 << 20;
let folders = 0;
/** The folders of this process's libraries, removed at its exit. */
const live = new Set<string>();

function removeLiveFolders(): void {
  for (const dir of live) rmSync(dir, { recursive: true, force: true });
}

/** This user's folder of adapter copies (read at each use: the temporary folder is the environment's). */
export function adapterCopiesRoot(): string {
  return join(tmpdir(), `weact-adapter-copies-${process.getuid!()}`);
}

/** A copy: where it is, and the SHA-256 of its bytes (of a PEFT folder's two files: of both, in order). */
export interface AdapterCopy {
  path: string;
  sha256: string;
}

/** One library's content-addressed copies of the adapter files it loads. */
export class AdapterCopies {
  private temps = 0;
  readonly dir = join(adapterCopiesRoot(), `${process.pid}-${RUN_NONCE}-${++folders}`);

  /**
   * Copies an opened GGUF file to `<sha256>/<its name>`: the same bytes registered twice (another alias or scale) share
   * one copy. The file's name is kept (an engine started with its own copy of the file knows it by that name).
   */
  async copy(file: ConfinedFile, field: PathField): Promise<AdapterCopy> {
    const temp = await this.temp(file, field, file.size);
    try {
      const sha256 = await this.copyInto(file, join(temp, basename(file.realPath)), field);
      const home = await this.place(temp, sha256);
      // the one file there: this name, or the name these bytes had when they were copied first
      const [name] = await readdir(home);
      return { path: join(home, name!), sha256 };
    } finally {
      await rm(temp, { recursive: true, force: true });
    }
  }

  /** Copies the files of a PEFT folder, each opened, under their names to a folder named by their hashes. */
  async copyFolder(files: readonly { name: string; file: ConfinedFile }[], field: PathField): Promise<AdapterCopy> {
    const temp = await this.temp(
      files[0]!.file,
      field,
      files.reduce((n, f) => n + f.file.size, 0),
    );
    try {
      const hash = createHash("sha256");
      for (const { name, file } of files)
        hash.update(`${name}:${await this.copyInto(file, join(temp, name), field)}\n`);
      const sha256 = hash.digest("hex");
      return { path: await this.place(temp, `peft-${sha256}`), sha256 };
    } finally {
      await rm(temp, { recursive: true, force: true });
    }
  }

  /** Removes the copies whose hash is not in `kept` (nothing in this library or the engine uses them any more). */
  async keepOnly(kept: ReadonlySet<string>): Promise<void> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    for (const name of names)
      if (!kept.has(name)) await rm(join(this.dir, name), { recursive: true, force: true }).catch(() => undefined);
  }

  /** Removes a copy made for one load only (a PEFT folder: the engine keeps its own form of it). */
  async remove(copy: AdapterCopy): Promise<void> {
    await rm(copy.path, { recursive: true, force: true }).catch(() => undefined);
  }

  /**
   * Removes the copies of servers no longer running, and this pid's of an earlier server (another nonce). Never fails:
   * what it cannot remove stays for a later start, and a folder that is not private is left alone.
   */
  static async sweep(): Promise<void> {
    const root = adapterCopiesRoot();
    let names: string[];
    try {
      if (privateFolderProblem(await lstat(root))) return;
      names = await readdir(root);
    } catch {
      return;
    }
    for (const name of names) {
      const [, pidText, nonce] = FOLDER_NAME.exec(name) ?? [];
      if (leftOver(pidText, nonce)) await rm(join(root, name), { recursive: true, force: true }).catch(() => undefined);
    }
  }

  /** A new temporary folder in this library's folder (made private if missing), with room for `bytes`. */
  private async temp(file: ConfinedFile, field: PathField, bytes: number): Promise<string> {
    const root = adapterCopiesRoot();
    try {
      await mkdir(root, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "EEXIST") throw err;
      });
      const unsafe = privateFolderProblem(await lstat(root));
      if (unsafe)
        throw new AdapterPathError(
          "adapter_copy_failed",
          field,
          file.path,
          `cannot be copied: the server's folder of adapter copies, ${root}, ${unsafe}`,
          "it must be a directory of the server user's only (mode 0700): remove it and the server makes it again",
        );
      await mkdir(this.dir, { mode: 0o700, recursive: true });
      if (!live.size) process.once("exit", removeLiveFolders);
      live.add(this.dir);
      const { bavail, bsize } = await statfs(this.dir);
      if (bavail * bsize < bytes)
        throw new AdapterPathError(
          "adapter_copy_failed",
          field,
          file.path,
          `cannot be copied to the server's folder ${this.dir}: it needs ${mib(bytes)} and the disk has ${mib(bavail * bsize)} free`,
          "free space there, or start the server with TMPDIR set to a folder on a larger disk",
        );
      const temp = join(this.dir, `.tmp-${++this.temps}`);
      await mkdir(temp, { mode: 0o700 });
      return temp;
    } catch (err) {
      throw copyError(err, field, file.path, this.dir);
    }
  }

  /** Streams the opened file's first `size` bytes (its size when opened) into `target`, hashing them on the way. */
  private async copyInto(file: ConfinedFile, target: string, field: PathField): Promise<string> {
    const hash = createHash("sha256");
    let out: FileHandle | undefined;
    try {
      out = await open(target, "wx", 0o600);
      const buffer = Buffer.allocUnsafe(Math.max(1, Math.min(CHUNK, file.size)));
      for (let pos = 0; pos < file.size;) {
        const { bytesRead } = await file.handle.read(buffer, 0, Math.min(buffer.length, file.size - pos), pos);
        if (bytesRead === 0)
          throw new AdapterPathError(
            "adapter_changed",
            field,
            file.path,
            "was cut short while the server copied it",
            "leave it in place while it is registered, then call again",
          );
        const chunk = buffer.subarray(0, bytesRead);
        hash.update(chunk);
        for (let written = 0; written < chunk.length;)
          written += (await out.write(chunk, written, chunk.length - written)).bytesWritten;
        pos += bytesRead;
      }
      return hash.digest("hex");
    } catch (err) {
      throw copyError(err, field, file.path, this.dir);
    } finally {
      await out?.close();
    }
  }

  /** Moves a finished temporary folder to `name`, unless a copy of the same bytes is there already. */
  private async place(temp: string, name: string): Promise<string> {
    const placed = join(this.dir, name);
    try {
      await rename(temp, placed);
    } catch (err) {
      // a folder of that name holds these very bytes (content-addressed): keep it
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "ENOTEMPTY" && code !== "EEXIST") throw err;
    }
    return placed;
  }
}

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

/** A copy that failed for the file system's reasons, in words (the errno's name means nothing to a caller). */
function copyError(err: unknown, field: PathField, path: string, dir: string): AdapterPathError {
  if (err instanceof AdapterPathError) return err;
  const code = (err as NodeJS.ErrnoException).code;
  const reason =
    code === "ENOSPC" || code === "EDQUOT"
      ? "no space left on its disk"
      : code === "EACCES" || code === "EPERM" || code === "EROFS"
        ? "the server may not write there"
        : code === "EIO"
          ? "an input/output error"
          : "the file system refused it";
  return new AdapterPathError(
    "adapter_copy_failed",
    field,
    path,
    `cannot be copied to the server's folder ${dir} (${reason})`,
    "free space there or make it writable, or start the server with TMPDIR set to another folder",
  );
}
