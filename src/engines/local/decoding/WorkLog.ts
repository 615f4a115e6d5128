/**
 * One decode's part in the engine's decode rounds: its context, whether it was evaluation ahead of time, when it asked
 * for its round, got it, and was done.
 */
export interface DecodeHold {
  readonly context: number;
  readonly background: boolean;
  readonly queuedAt: number;
  readonly startedAt: number;
  readonly endedAt: number;
}

/**
 * The recent decodes of every context, with timestamps (performance.now()): the record that shows how long a caller's
 * decode waited and for what. Bounded: the oldest go first.
 */
export class WorkLog {
  private holds: DecodeHold[] = [];

  constructor(private readonly max = 20_000) {}

  record(hold: DecodeHold): void {
    this.holds.push(hold);
    if (this.holds.length > this.max) this.holds = this.holds.slice(-this.max / 2);
  }

  list(): readonly DecodeHold[] {
    return this.holds;
  }
}
