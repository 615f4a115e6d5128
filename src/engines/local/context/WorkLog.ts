import { Mutex } from "../../../mutex.js";

/**
 * One hold of a context's lock: who held it (a caller, or evaluation ahead of time), when it was asked for, got, given
 * back.
 */
export interface LockHold {
  readonly context: number;
  readonly background: boolean;
  readonly queuedAt: number;
  readonly startedAt: number;
  readonly endedAt: number;
}

/**
 * The recent holds of every context's lock, with timestamps (performance.now()): the record that shows how long
 * a caller waited and for what. Bounded: the oldest holds go first.
 */
export class WorkLog {
  private holds: LockHold[] = [];

  constructor(private readonly max = 20_000) {}

  record(hold: LockHold): void {
    this.holds.push(hold);
    if (this.holds.length > this.max) this.holds = this.holds.slice(-this.max / 2);
  }

  list(): readonly LockHold[] {
    return this.holds;
  }
}

/**
 * A context's FIFO lock whose every hold is recorded in the engine's `WorkLog`, marked as a caller's or as background
 * work.
 */
export class TimedLock {
  private readonly mutex = new Mutex();

  constructor(
    private readonly log: WorkLog,
    private readonly context: number,
  ) {}

  /** Callers queued or running. */
  get depth(): number {
    return this.mutex.depth;
  }

  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.hold(false, fn);
  }

  /** A hold for evaluation ahead of time: recorded apart, so a caller's wait for it can be checked. */
  runBackground<T>(fn: () => Promise<T>): Promise<T> {
    return this.hold(true, fn);
  }

  private async hold<T>(background: boolean, fn: () => Promise<T>): Promise<T> {
    const queuedAt = performance.now();
    let startedAt = queuedAt;
    try {
      return await this.mutex.run(() => {
        startedAt = performance.now();
        return fn();
      });
    } finally {
      this.log.record({ context: this.context, background, queuedAt, startedAt, endedAt: performance.now() });
    }
  }
}
