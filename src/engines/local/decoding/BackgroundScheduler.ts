import type { EngineLogger } from "../../../engine/index.js";

/** Something with evaluation to do ahead of time: a session whose other caches lag behind its history. */
export interface BackgroundSource {
  /** Does one decode of background work (or starts a cache); false when it has nothing to do now. */
  catchUpStep(): Promise<boolean>;
}

export interface BackgroundOptions {
  /** Whether evaluation ahead of time runs at all. */
  enabled: boolean;
  /**
   * How long one background decode should take (a caller waits at most one): its tokens are sized from the speed
   * measured so far, between `minTokens` (shorter decodes are inefficient) and `maxTokens` (one batch).
   */
  decodeMs: number;
  minTokens: number;
  maxTokens: number;
  /**
   * Quiet time after the last caller's work before background work starts: after a switch the client's next turn
   * usually comes sooner; after a turn a tool usually runs (`afterTurnMs`, shorter, so none of its time is lost).
   */
  idleMs: number;
  afterTurnMs: number;
  logger: EngineLogger;
}

export interface BackgroundTotals {
  batches: number;
  tokens: number;
  ms: number;
  /** Background steps that found a caller waiting once they got their context, and gave way. */
  yields: number;
  /** Caches started ahead of time (in a free sequence, from the shared prefix when there is one). */
  lanesStarted: number;
}

/**
 * The engine's one scheduler of evaluation ahead of time. Every caller's evaluation (switch, turn, log-probs)
 * runs through `foreground`; background steps run only while none does, one decode at a time, checking
 * again before each decode: a caller that arrives waits at most for the decode under way. Between steps
 * the sources are served round-robin.
 */
export class BackgroundScheduler {
  private foregroundCalls = 0;
  private timer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;
  private stopped = false;
  private readonly sources = new Set<BackgroundSource>();
  readonly totals: BackgroundTotals = { batches: 0, tokens: 0, ms: 0, yields: 0, lanesStarted: 0 };
  /** Prompt tokens evaluated for callers. */
  foregroundTokens = 0;
  /** Recent background decodes' time per token (an exponential average; it grows with the cache's length). */
  private msPerToken: number | undefined;

  constructor(readonly opts: BackgroundOptions) {}

  get enabled(): boolean {
    return this.opts.enabled;
  }

  /**
   * A caller's work begins: background work gives way to it until `endForeground`, and may resume once every
   * caller's work is done (after `quietMs`, default `idleMs`).
   */
  beginForeground(): void {
    this.foregroundCalls++;
    clearTimeout(this.timer);
  }

  /** A caller's work ended (call once for each `beginForeground`, in a `finally`). */
  endForeground(quietMs = this.opts.idleMs): void {
    if (--this.foregroundCalls === 0) this.schedule(quietMs);
  }

  /** A caller is waiting or working (or the engine is closing): background work must not start a decode. */
  get mustYield(): boolean {
    return this.foregroundCalls > 0 || this.stopped;
  }

  add(source: BackgroundSource): void {
    this.sources.add(source);
  }

  remove(source: BackgroundSource): void {
    this.sources.delete(source);
  }

  /** Something new to do (a hint changed): look again once the engine is quiet. */
  wake(): void {
    if (!this.foregroundCalls) this.schedule(this.opts.idleMs);
  }

  /** Tokens for the next background decode: what `decodeMs` holds at the measured speed. */
  batchTokens(): number {
    const { decodeMs, minTokens, maxTokens } = this.opts;
    if (this.msPerToken === undefined) return minTokens;
    return Math.max(minTokens, Math.min(maxTokens, Math.floor(decodeMs / this.msPerToken)));
  }

  /** Records a background decode (tokens, time) done by a source. */
  recordBatch(tokens: number, ms: number): void {
    this.totals.batches++;
    this.totals.tokens += tokens;
    this.totals.ms += ms;
    if (tokens < this.opts.minTokens) return; // a short tail says little about the speed
    const speed = ms / tokens;
    this.msPerToken = this.msPerToken === undefined ? speed : 0.7 * this.msPerToken + 0.3 * speed;
  }

  private schedule(quietMs: number): void {
    if (!this.opts.enabled || this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.loop ??= this.drain().finally(() => (this.loop = undefined));
    }, quietMs);
    this.timer.unref();
  }

  private async drain(): Promise<void> {
    for (;;) {
      let worked = false;
      for (const source of [...this.sources]) {
        if (this.mustYield) return;
        try {
          if (await source.catchUpStep()) worked = true;
        } catch (err) {
          // a failed step leaves a cache a caller's sync corrects (or drops); it never fails a caller
          this.opts.logger.warn({ err: (err as Error).message }, "background catch-up step failed");
        }
      }
      if (!worked) return;
    }
  }

  /** Stops background work; resolves once the step under way has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.loop;
  }
}
