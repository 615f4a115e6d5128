import { BusyError } from "./errors.js";

export interface WorkQueueLimits {
  /** Model calls waiting or running, all clients together. */
  maxPending: number;
  /** Model calls one client may have waiting or running. */
  maxPendingPerClient: number;
  /** Model calls let through to the engine at once (the engine's `capacity.concurrentCalls`). */
  concurrency: number;
}

interface Job {
  start: () => void;
}

/**
 * Bounds the model work waiting on the engine and shares it fairly: each client has its own FIFO, and a free
 * slot goes to the waiting client served least recently, so one client's backlog delays another's call by at
 * most the calls already running. Work beyond a bound is refused at once with a "busy" error naming it.
 */
export class WorkQueue {
  private pending = 0;
  private running = 0;
  private readonly perClient = new Map<string, number>();
  private readonly waiting = new Map<string, Job[]>();
  /** When each client was last let through (a counter): the least recent goes next. */
  private readonly lastServed = new Map<string, number>();
  private clock = 0;

  constructor(private readonly limits: WorkQueueLimits) {}

  /** Runs `fn` when its turn comes; `fn` gets how long the call waited here (its share of the call's queue time). */
  async run<T>(client: string, fn: (waitedMs: number) => Promise<T>): Promise<T> {
    const turn = await this.admit(client);
    try {
      return await fn(turn.waitedMs);
    } finally {
      turn.done();
    }
  }

  /**
   * Waits for `client`'s turn; the caller does its model call, then calls `done()` once (in a `finally`). Refused at
   * once with a BusyError beyond a bound.
   */
  async admit(client: string): Promise<{ waitedMs: number; done: () => void }> {
    const mine = this.perClient.get(client) ?? 0;
    if (mine >= this.limits.maxPendingPerClient) {
      throw new BusyError(
        `this client has ${mine} model calls queued, its maximum (sessions.maxQueuedPerClient); wait for one to finish`,
      );
    }
    if (this.pending >= this.limits.maxPending) {
      throw new BusyError(
        `the model is busy (${this.pending} calls queued, the maximum: sessions.maxQueuedGenerations); retry shortly`,
      );
    }
    this.pending++;
    this.perClient.set(client, mine + 1);
    const arrived = performance.now();
    const leave = () => {
      this.pending--;
      const left = (this.perClient.get(client) ?? 1) - 1;
      if (left > 0) this.perClient.set(client, left);
      else this.perClient.delete(client);
    };
    try {
      await new Promise<void>((start) => {
        const queue = this.waiting.get(client) ?? [];
        queue.push({ start });
        this.waiting.set(client, queue);
        this.dispatch();
      });
    } catch (err) {
      leave();
      throw err;
    }
    let finished = false;
    return {
      waitedMs: performance.now() - arrived,
      done: () => {
        if (finished) return;
        finished = true;
        this.running--;
        this.dispatch();
        leave();
      },
    };
  }

  /** Calls waiting or running, running, and the bound: for the status page. */
  stats(): { pending: number; running: number; maxPending: number } {
    return { pending: this.pending, running: this.running, maxPending: this.limits.maxPending };
  }

  private dispatch(): void {
    while (this.running < this.limits.concurrency && this.waiting.size > 0) {
      let next: string | undefined;
      for (const client of this.waiting.keys()) {
        if (next === undefined || (this.lastServed.get(client) ?? 0) < (this.lastServed.get(next) ?? 0)) next = client;
      }
      const queue = this.waiting.get(next!)!;
      const job = queue.shift()!;
      if (queue.length === 0) this.waiting.delete(next!);
      this.lastServed.set(next!, ++this.clock);
      this.running++;
      job.start();
    }
    // clients with nothing queued need no turn history
    for (const client of this.lastServed.keys())
      if (!this.perClient.has(client) && !this.waiting.has(client)) this.lastServed.delete(client);
  }
}
