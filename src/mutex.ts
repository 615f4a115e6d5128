import { Mutex as AsyncMutex } from "async-mutex";

/**
 * A FIFO async lock: callers run one at a time, in the order they asked (async-mutex queues them). It also
 * counts the callers queued or running (`depth`), which async-mutex does not expose: session expiry and the
 * status page read it, and the lane pool prefers evicting a lane whose context nobody is waiting on.
 */
export class Mutex {
  private readonly mutex = new AsyncMutex();
  private waiting = 0;

  /** Callers queued or running. */
  get depth(): number {
    return this.waiting;
  }

  /** Waits for the lock; the caller runs, then calls the returned release once (in a `finally`). */
  async acquire(): Promise<() => void> {
    this.waiting++;
    try {
      const release = await this.mutex.acquire();
      let released = false;
      return () => {
        if (released) return;
        released = true;
        this.waiting--;
        release();
      };
    } catch (err) {
      this.waiting--;
      throw err;
    }
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    this.waiting++;
    try {
      return await this.mutex.runExclusive(fn);
    } finally {
      this.waiting--;
    }
  }
}
