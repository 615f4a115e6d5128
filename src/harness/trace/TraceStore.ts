import { open, readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";

const ID = /^t_[A-Za-z0-9_-]{8,64}$/;
/** The first line (the run_start event, with the task) is read in full up to this size. */
const MAX_FIRST_LINE_BYTES = 64 * 1024 * 1024;
/** Trace files opened at once while listing: a folder of many traces must not exhaust the open-file limit. */
const OPEN_AT_ONCE = 16;

/** What the trace folder may hold. */
export interface TraceLimits {
  /** Trace files in the folder, everyone's (harness.maxTraceFiles). */
  maxFiles: number;
  /** Bytes of one owner's traces (harness.maxTraceMiBPerClient). */
  maxBytesPerOwner: number;
}

/** A line of a trace file that is not a JSON event (a crash mid-write leaves a torn last line). */
export interface UnreadableLine {
  type: "unreadable_line";
  line: number;
  bytes: number;
  reason: string;
}

/** The trace files of a folder, readable by the client that ran them; earlier runs stay listed after a restart. */
export class TraceStore {
  constructor(private readonly dir: string) {}

  /** Trace ids whose run belongs to `owner`, newest last. */
  async list(owner: string): Promise<string[]> {
    const ids = await this.ids();
    const owners = await mapLimited(ids, OPEN_AT_ONCE, (id) => this.ownerOf(this.file(id)));
    return ids.filter((_, i) => owners[i] === owner);
  }

  /**
   * Deletes traces as a run of `owner` starts, least recently written first: the owner's own beyond its byte quota
   * (what one client may keep, however large its tasks: its traces never push out another's), then anyone's beyond
   * the folder's file count. A trace in `live` (runs still writing, the starting one among them) is never deleted:
   * a run waiting on its client is the least recently written, and its next event would recreate the file without
   * its run_start line (unreadable by its owner, outside any quota).
   */
  async prune(owner: string, live: ReadonlySet<string>, limits: TraceLimits): Promise<void> {
    const ids = await this.ids();
    const traces = await mapLimited(ids, OPEN_AT_ONCE, async (id) => {
      const s = await stat(this.file(id)).catch(() => undefined);
      return { id, at: s?.mtimeMs ?? 0, bytes: s?.size ?? 0 };
    });
    const oldestFirst = traces.sort((a, b) => a.at - b.at);
    const doomed = new Set<string>();
    let total = oldestFirst.reduce((sum, t) => sum + t.bytes, 0);
    // the owner's traces are found by reading every first line: only worth it when the folder holds more than a quota
    if (total > limits.maxBytesPerOwner) {
      const owners = await mapLimited(oldestFirst, OPEN_AT_ONCE, ({ id }) => this.ownerOf(this.file(id)));
      const own = oldestFirst.filter((_, i) => owners[i] === owner);
      total = own.reduce((sum, t) => sum + t.bytes, 0);
      for (const t of own) {
        if (total <= limits.maxBytesPerOwner) break;
        if (live.has(t.id)) continue;
        doomed.add(t.id);
        total -= t.bytes;
      }
    }
    const kept = oldestFirst.filter((t) => !doomed.has(t.id));
    const excess = Math.max(0, kept.length - limits.maxFiles);
    for (const t of kept.filter((t) => !live.has(t.id)).slice(0, excess)) doomed.add(t.id);
    await mapLimited([...doomed], OPEN_AT_ONCE, (id) => rm(this.file(id), { force: true }));
  }

  private async ids(): Promise<string[]> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    return names.filter((f) => f.endsWith(".jsonl") && ID.test(f.slice(0, -6))).map((f) => f.slice(0, -6));
  }

  private file(id: string): string {
    return join(this.dir, `${id}.jsonl`);
  }

  /**
   * The events of a trace of `owner`, or undefined (unknown or someone else's look the same). A line that is
   * not JSON (a torn last line) does not hide the rest: it is skipped and reported as an `unreadable_line` event.
   */
  async read(owner: string, id: string): Promise<unknown[] | undefined> {
    if (!ID.test(id)) return undefined;
    const file = this.file(id);
    if ((await this.ownerOf(file)) !== owner) return undefined;
    const lines = (await readFile(file, "utf8")).split("\n");
    const events: unknown[] = [];
    lines.forEach((line, i) => {
      if (!line) return;
      try {
        events.push(JSON.parse(line));
      } catch {
        const torn = i === lines.length - 1;
        const reason = torn
          ? "the last line ends mid-event (the writer stopped while writing it); the events before it are complete"
          : "not a JSON event";
        events.push({
          type: "unreadable_line",
          line: i + 1,
          bytes: Buffer.byteLength(line),
          reason,
        } satisfies UnreadableLine);
      }
    });
    return events;
  }

  /** The owner named by the first line, read in full however long (a long task makes it long). */
  private async ownerOf(file: string): Promise<string | undefined> {
    let handle;
    try {
      handle = await open(file, "r");
      const chunks: Buffer[] = [];
      let read = 0;
      for (;;) {
        const chunk = Buffer.alloc(Math.min(1 << 20, MAX_FIRST_LINE_BYTES - read));
        const { bytesRead } = await handle.read(chunk, 0, chunk.length, read);
        const end = chunk.subarray(0, bytesRead).indexOf(0x0a);
        chunks.push(chunk.subarray(0, end >= 0 ? end : bytesRead));
        read += bytesRead;
        if (end >= 0 || bytesRead === 0 || read >= MAX_FIRST_LINE_BYTES) break;
      }
      const first = Buffer.concat(chunks).toString("utf8");
      return first ? (JSON.parse(first) as { owner?: string }).owner : undefined;
    } catch {
      return undefined;
    } finally {
      await handle?.close();
    }
  }
}

/** `fn` over `items`, at most `limit` at a time, results in order. */
async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
