/** A FIFO async lock: callers run one at a time, in the order they asked. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();
  private waiting = 0;

  /** Callers queued or running. */
  get depth(): number {
    return this.waiting;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    this.waiting++;
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((resolve) => (release = resolve));
    try {
      await previous;
      return await fn();
    } finally {
      this.waiting--;
      release();
    }
  }
}
