import { appendFileSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";

/** Mutually exclusive time categories of a trajectory (the paper's appendix B.3). */
export type TimeCategory =
  "model" | "external_tool" | "adapter_control" | "cache_rebuild" | "answer_extraction" | "orchestration";
export const TIME_CATEGORIES: readonly TimeCategory[] = [
  "model",
  "external_tool",
  "adapter_control",
  "cache_rebuild",
  "answer_extraction",
  "orchestration",
];

export type TraceEvent = { type: string; t: number } & Record<string, unknown>;

export interface TimeBreakdown {
  wallMs: number;
  /** Model time by the weights that served it ("base" or an adapter alias). */
  model: Record<string, number>;
  externalTool: number;
  adapterControl: number;
  cacheRebuild: number;
  answerExtraction: number;
  orchestration: number;
  /** Wall time no timer covered; must stay under 1%. */
  unattributedMs: number;
  unattributedShare: number;
  /**
   * Evaluation the engine did ahead of time for this run (while its tools ran, between its calls): it overlaps
   * the categories above, so it is reported beside them, never inside (it is not hidden in tool time).
   */
  backgroundMs: number;
}

const now = () => performance.now();

/**
 * One trajectory's events and time. Every category is measured by its own timer around the work it names;
 * nested intervals identified inside another (a KV rebuild inside a switch) are moved out of the enclosing
 * one so no time counts twice. Events are appended to a JSONL file as they happen, so a crash loses at
 * most the event in flight.
 */
export class Trace {
  readonly events: TraceEvent[] = [];
  private readonly started = now();
  private ended: number | undefined;
  private readonly totals = new Map<string, number>();
  private backgroundMs = 0;
  /** Called with every event as it is recorded (streaming clients, the status page). */
  readonly listeners: ((e: TraceEvent) => void)[] = [];

  constructor(
    readonly id: string,
    private readonly file: string | undefined,
  ) {
    if (file) mkdirSync(dirname(file), { recursive: true });
  }

  /** Records an event; writing it is the harness's own work, timed as orchestration. */
  event(type: string, fields: Record<string, unknown> = {}): TraceEvent {
    const start = now();
    const e: TraceEvent = { type, t: Number((start - this.started).toFixed(3)), ...fields };
    this.events.push(e);
    if (this.file) appendFileSync(this.file, JSON.stringify(e) + "\n");
    for (const listener of this.listeners) listener(e);
    this.add("orchestration", now() - start);
    return e;
  }

  /** Times `fn` into `category` (model time into its route); returns its result and the elapsed ms. */
  async measure<T>(category: TimeCategory, fn: () => Promise<T>, route?: string): Promise<{ value: T; ms: number }> {
    const start = now();
    try {
      const value = await fn();
      return { value, ms: this.add(category, now() - start, route) };
    } catch (err) {
      this.add(category, now() - start, route);
      throw err;
    }
  }

  measureSync<T>(category: TimeCategory, fn: () => T): T {
    const start = now();
    try {
      return fn();
    } finally {
      this.add(category, now() - start);
    }
  }

  /** Moves `ms` of an identified nested interval from `from` to `to`. */
  move(ms: number, from: TimeCategory, to: TimeCategory, fromRoute?: string): void {
    this.add(from, -ms, fromRoute);
    this.add(to, ms);
  }

  /** Counts evaluation done ahead of time: beside the partition, since it ran while something else was being timed. */
  background(ms: number): void {
    this.backgroundMs += ms;
  }

  end(): TimeBreakdown {
    this.ended ??= now();
    return this.breakdown();
  }

  breakdown(): TimeBreakdown {
    const wallMs = (this.ended ?? now()) - this.started;
    const model: Record<string, number> = {};
    for (const [key, v] of this.totals) if (key.startsWith("model:")) model[key.slice(6)] = round(v);
    const get = (c: TimeCategory) => this.totals.get(c) ?? 0;
    const attributed = [...this.totals.values()].reduce((a, b) => a + b, 0);
    const unattributed = wallMs - attributed;
    return {
      wallMs: round(wallMs),
      model,
      externalTool: round(get("external_tool")),
      adapterControl: round(get("adapter_control")),
      cacheRebuild: round(get("cache_rebuild")),
      answerExtraction: round(get("answer_extraction")),
      orchestration: round(get("orchestration")),
      unattributedMs: round(unattributed),
      unattributedShare: wallMs > 0 ? Number((unattributed / wallMs).toFixed(5)) : 0,
      backgroundMs: round(this.backgroundMs),
    };
  }

  private add(category: TimeCategory, ms: number, route?: string): number {
    const key = category === "model" ? `model:${route ?? "base"}` : category;
    this.totals.set(key, (this.totals.get(key) ?? 0) + ms);
    return ms;
  }
}

const round = (n: number) => Number(n.toFixed(3));
