import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";

const ID = /^t_[A-Za-z0-9_-]{8,64}$/;

/** The trace files of a folder, readable by the client that ran them; earlier runs stay listed after a restart. */
export class TraceStore {
  constructor(private readonly dir: string) {}

  /** Trace ids whose run belongs to `owner`, newest last. */
  list(owner: string): string[] {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .filter((f) => f.endsWith(".jsonl") && ID.test(f.slice(0, -6)))
      .filter((f) => this.ownerOf(join(this.dir, f)) === owner)
      .map((f) => f.slice(0, -6));
  }

  /** The events of a trace of `owner`, or undefined (unknown or someone else's look the same). */
  read(owner: string, id: string): unknown[] | undefined {
    if (!ID.test(id)) return undefined;
    const file = join(this.dir, `${id}.jsonl`);
    if (!existsSync(file) || this.ownerOf(file) !== owner) return undefined;
    return readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  }

  private ownerOf(file: string): string | undefined {
    const fd = openSync(file, "r");
    try {
      const buf = Buffer.alloc(64 * 1024);
      const n = readSync(fd, buf, 0, buf.length, 0);
      const first = buf.subarray(0, n).toString("utf8").split("\n")[0];
      return first ? (JSON.parse(first) as { owner?: string }).owner : undefined;
    } catch {
      return undefined;
    } finally {
      closeSync(fd);
    }
  }
}
