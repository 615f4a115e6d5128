import { BusyError } from "./errors.js";

/**
 * Bounds the model work waiting on the engine. Order is kept by the engine's FIFO context locks;
 * this refuses work beyond the bound with a clear "busy" error instead of letting it pile up.
 */
export class WorkQueue {
  private pending = 0;

  constructor(private readonly maxPending: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.pending >= this.maxPending) throw new BusyError(this.pending);
    this.pending++;
    try {
      return await fn();
    } finally {
      this.pending--;
    }
  }
}
