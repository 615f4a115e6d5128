import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { AdapterCopies, adapterCopiesRoot } from "../../src/library/AdapterCopies.js";
import { openInside } from "../../src/library/confine.js";
import { AdapterPathError } from "../../src/library/errors.js";
import { tempDir } from "../helpers/files.js";

/**
 * What `realpath` answers, where a test sets it: the name as it resolved a moment before a symlink was swapped in, so
 * the swap between the check and the open happens every time instead of by chance.
 */
const stale = new Map<string, string>();
vi.mock("node:fs/promises", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs/promises")>();
  return {
    ...fs,
    realpath: (path: string) => (stale.has(path) ? Promise.resolve(stale.get(path)!) : fs.realpath(path)),
  };
});

const root = tempDir("weact-open-");
const lib = join(root, "lib");
const outside = join(root, "outside");
mkdirSync(join(lib, "nested"), { recursive: true });
mkdirSync(outside);
writeFileSync(join(lib, "a.gguf"), "GGUF in the folder");
writeFileSync(join(lib, "nested", "b.gguf"), "GGUF nested");
writeFileSync(join(outside, "secret.gguf"), "secret bytes");
writeFileSync(join(outside, "b.gguf"), "secret bytes under b's name");
symlinkSync(join(lib, "a.gguf"), join(lib, "inside-link.gguf"));
symlinkSync(join(outside, "secret.gguf"), join(lib, "file-link.gguf"));
symlinkSync(outside, join(lib, "dir-link"));
symlinkSync(join(lib, "loop.gguf"), join(lib, "loop.gguf"));
execFileSync("mkfifo", [join(lib, "fifo.gguf")]);
// a second name for a file outside: /proc/self/fd would name the one inside
linkSync(join(outside, "secret.gguf"), join(lib, "hard-link.gguf"));

/** The code of the error `openInside` refuses with, or "opened" (the descriptor closed again). */
async function outcome(path: string): Promise<string> {
  try {
    const file = await openInside(path, [lib], "file");
    await file.handle.close();
    return "opened";
  } catch (err) {
    if (!(err instanceof AdapterPathError)) throw err;
    expect(err.message).toMatch(new RegExp(`^file: ${path} .+; .+ \\[${err.code}\\]$`));
    return err.code;
  }
}

describe("openInside: an adapter file opened only inside the adapter folders", () => {
  it("opens regular files inside, also through a symlink that stays inside, at their real path", async () => {
    const file = await openInside(join(lib, "inside-link.gguf"), [lib], "file");
    try {
      expect(file.realPath).toBe(join(lib, "a.gguf"));
      expect(file.size).toBe("GGUF in the folder".length);
    } finally {
      await file.handle.close();
    }
    expect(await outcome(join(lib, "nested", "b.gguf"))).toBe("opened");
  });

  it("refuses a symlinked file or folder leading out, a loop, a FIFO, a hard link, a missing file, each with its code", async () => {
    expect(await outcome(join(lib, "file-link.gguf"))).toBe("adapter_outside");
    expect(await outcome(join(lib, "dir-link", "secret.gguf"))).toBe("adapter_outside");
    expect(await outcome(join(lib, "..", "outside", "secret.gguf"))).toBe("adapter_outside");
    expect(await outcome(join(outside, "missing.gguf"))).toBe("adapter_outside");
    expect(await outcome(join(lib, "loop.gguf"))).toBe("adapter_symlink_loop");
    expect(await outcome(join(lib, "missing.gguf"))).toBe("adapter_missing");
    const started = performance.now();
    expect(await outcome(join(lib, "fifo.gguf"))).toBe("adapter_not_regular");
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(await outcome(lib)).toBe("adapter_not_regular");
    expect(await outcome(join(lib, "hard-link.gguf"))).toBe("adapter_not_regular");
  });

  it("refuses a symlink swapped in after the name resolved: as the file itself, or as a folder on its path", async () => {
    // the file was a regular file when resolved, and is a link out when opened
    stale.set(join(lib, "file-link.gguf"), join(lib, "file-link.gguf"));
    // nested/ resolved as the folder, and dir-link (a link out) stands in its place when the file is opened
    stale.set(join(lib, "swapped", "b.gguf"), join(lib, "dir-link", "b.gguf"));
    try {
      expect(await outcome(join(lib, "file-link.gguf"))).toBe("adapter_changed");
      expect(await outcome(join(lib, "swapped", "b.gguf"))).toBe("adapter_changed");
    } finally {
      stale.clear();
    }
  });
});

describe("AdapterCopies: the server's private copies, named by their content", () => {
  const tmp = tempDir("weact-copies-");
  let saved: string | undefined;
  beforeAll(() => {
    saved = process.env.TMPDIR;
    process.env.TMPDIR = tmp;
  });
  afterAll(() => {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  });
  const copyOf = async (copies: AdapterCopies, path: string) => {
    const file = await openInside(path, [lib], "file");
    try {
      return await copies.copy(file, "file");
    } finally {
      await file.handle.close();
    }
  };

  it("copies the opened bytes to <sha256>/<name>, private; the same bytes twice share one copy; unused ones go", async () => {
    const copies = new AdapterCopies();
    const a = await copyOf(copies, join(lib, "a.gguf"));
    const sha = createHash("sha256")
      .update(readFileSync(join(lib, "a.gguf")))
      .digest("hex");
    expect(a).toEqual({ path: join(copies.dir, sha, "a.gguf"), sha256: sha });
    expect(readFileSync(a.path, "utf8")).toBe("GGUF in the folder");
    expect(statSync(a.path).mode & 0o777).toBe(0o600);
    for (const dir of [adapterCopiesRoot(), copies.dir, join(copies.dir, sha)])
      expect(statSync(dir).mode & 0o077).toBe(0);
    expect(await copyOf(copies, join(lib, "inside-link.gguf"))).toEqual(a);
    const b = await copyOf(copies, join(lib, "nested", "b.gguf"));
    expect(readdirSync(copies.dir).sort()).toEqual([sha, b.sha256].sort());
    await copies.keepOnly(new Set([b.sha256]));
    expect(readdirSync(copies.dir)).toEqual([b.sha256]);
  });

  it("removes the copies of servers no longer running at the next start; refuses a folder open to others", async () => {
    const dead = join(adapterCopiesRoot(), "999999999-00000000-1");
    const running = join(adapterCopiesRoot(), `${process.ppid}-00000000-1`);
    mkdirSync(dead, { recursive: true });
    mkdirSync(running);
    await AdapterCopies.sweep();
    const left = readdirSync(adapterCopiesRoot());
    expect(left).not.toContain("999999999-00000000-1");
    expect(left).toContain(`${process.ppid}-00000000-1`);

    chmodSync(adapterCopiesRoot(), 0o777);
    try {
      const refused = await copyOf(new AdapterCopies(), join(lib, "a.gguf")).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(AdapterPathError);
      expect((refused as AdapterPathError).code).toBe("adapter_copy_failed");
      expect((refused as Error).message).toMatch(
        /is open to other users \(mode 777\); it must be a directory of the server user's only \(mode 0700\): remove it/,
      );
    } finally {
      chmodSync(adapterCopiesRoot(), 0o700);
    }
  });
});
