import { Mutex } from "../../../mutex.js";

/**
 * A sequence's lock: one lane operation on it at a time (a session's call, a step ahead of time, an eviction), in the
 * order asked. Sessions on other sequences of the same context go on meanwhile: their decodes meet in the engine's
 * decode rounds, not here. It moves with the sequence when a lane hands its sequence to another.
 */
export class SlotLock {
  private readonly mutex = new Mutex();
  private backgroundHold = false;

  /** Operations queued or running. */
  get depth(): number {
    return this.mutex.depth;
  }

  /** The operation running is evaluation ahead of time (its decodes are recorded as such). */
  get inBackground(): boolean {
    return this.backgroundHold;
  }

  /** Waits for the sequence; the caller releases it once done. */
  acquire(): Promise<() => void> {
    return this.mutex.acquire();
  }

  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.mutex.run(fn);
  }

  runBackground<T>(fn: () => Promise<T>): Promise<T> {
    return this.mutex.run(async () => {
      this.backgroundHold = true;
      try {
        return await fn();
      } finally {
        this.backgroundHold = false;
      }
    });
  }
}
