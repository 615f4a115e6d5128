import type { DecodeRoundStats } from "../../../engine/index.js";
import type { WorkLog } from "./WorkLog.js";

/**
 * What a decode needs to run: the context it runs in and the weight set applied there while it does. Decodes of one
 * group share llama.cpp batches; `apply` switches the context to the group's weights (a no-op when they are applied).
 */
export interface DecodeGroup {
  readonly context: number;
  /** Names the weight set exactly (adapter versions and scales). */
  readonly weights: string;
  /**
   * The decode's sequence id: a round lets its decodes through in this order, because llama.cpp decodes tokens of
   * several sequences in one piece only when their ids follow each other in the batch (its split over per-sequence
   * caches); otherwise each goes in a piece of its own.
   */
  readonly sequence: number;
  apply(): Promise<boolean>;
}

/** Whether two decodes may share a round (and so a batch): tests plant a careless one (testing.ts). */
export type SameRound = (a: DecodeGroup, b: DecodeGroup) => boolean;

/** The rule: one context, one weight set. */
export const sameContextAndWeights: SameRound = (a, b) => a.context === b.context && a.weights === b.weights;

interface Waiter {
  readonly group: DecodeGroup;
  readonly admit: () => void;
  readonly refuse: (err: unknown) => void;
}

/**
 * The engine's one schedule of native decodes, taken in rounds. A round belongs to one group (a context and the
 * weight set applied in it): every decode of that group waiting when the round starts is let through together, so
 * node-llama-cpp puts their tokens in one batch, and the round ends when they have all been decoded. The next round
 * goes to the group whose decode has waited longest; a decode arriving for the running group while another group
 * waits joins the next round of its group, so every group waiting gets one round before any group gets two. Weights
 * change only between rounds, when nothing is being decoded: pending evaluations of a context decode together under
 * whatever set is applied, so a decode can never run under another group's weights. One round at a time across
 * contexts too: contexts running together on the CPU's cores would each get half of them and spin-wait on the rest.
 */
export class DecodeRounds {
  private running: DecodeGroup | undefined;
  /** Resolves once the running group's weights are applied. */
  private ready: Promise<void> = Promise.resolve();
  private holders = 0;
  private readonly waiting: Waiter[] = [];
  private readonly counts: DecodeRoundStats = { rounds: 0, decodes: 0, weightChanges: 0 };

  /** `log` gets every decode's wait and run, marked as a caller's or as evaluation ahead of time. */
  constructor(
    private readonly log: WorkLog,
    private readonly sameGroup: SameRound = sameContextAndWeights,
  ) {}

  /** Since the engine started: rounds, decodes, and rounds that changed a context's weights. */
  get stats(): DecodeRoundStats {
    return { ...this.counts };
  }

  /**
   * Waits for `group`'s round (its weights applied in its context) and returns the function that ends this decode's
   * part in it. Rejects when the weights could not be applied; the round then goes to the next group.
   * `background`: evaluation ahead of time, recorded apart so a caller's wait for it can be checked.
   */
  async enter(group: DecodeGroup, background = false): Promise<() => void> {
    const queuedAt = performance.now();
    await this.admit(group);
    const startedAt = performance.now();
    this.counts.decodes++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.log.record({ context: group.context, background, queuedAt, startedAt, endedAt: performance.now() });
      this.leave();
    };
  }

  /** Runs `fn` in a round of its own: no decode in flight anywhere (detaching an adapter, freeing its memory). */
  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    await this.admit(EXCLUSIVE);
    try {
      return await fn();
    } finally {
      this.leave();
    }
  }

  /** Resolves once `group` holds a part in the running round (its weights applied). */
  private async admit(group: DecodeGroup): Promise<void> {
    const joins = this.running && this.sameGroup(this.running, group) && this.waiting.length === 0;
    if (!joins && this.running) {
      return new Promise<void>((admit, refuse) => this.waiting.push({ group, admit, refuse }));
    }
    if (joins) this.holders++;
    else this.start([group]);
    try {
      await this.ready;
    } catch (err) {
      this.leave();
      throw err;
    }
  }

  private leave(): void {
    if (--this.holders > 0) return;
    this.running = undefined;
    const next = this.waiting[0];
    if (!next) return;
    const round: Waiter[] = [];
    for (let i = 0; i < this.waiting.length;) {
      if (this.sameGroup(this.waiting[i]!.group, next.group)) round.push(...this.waiting.splice(i, 1));
      else i++;
    }
    round.sort((a, b) => a.group.sequence - b.group.sequence);
    this.start(
      round.map((w) => w.group),
      round,
    );
  }

  /**
   * Starts a round of one group's decodes (one part per entry of `groups`); `waiters` are let in once its weights are
   * applied.
   */
  private start(groups: readonly DecodeGroup[], waiters: readonly Waiter[] = []): void {
    const group = groups[0]!;
    this.running = group;
    this.holders = groups.length;
    if (group !== EXCLUSIVE) this.counts.rounds++;
    const applied = group.apply();
    this.ready = applied.then(() => undefined);
    this.ready.catch(() => undefined); // the decodes of the round hear the error; the process must not
    applied.then(
      (changed) => {
        if (changed) this.counts.weightChanges++;
        for (const w of waiters) w.admit();
      },
      (err: unknown) => {
        // every decode of the round is refused with the error; the last refusal hands the round on
        for (const w of waiters) {
          w.refuse(err);
          this.leave();
        }
      },
    );
  }
}

/** The group of an exclusive hold: in no context, sharing its round with nothing. */
const EXCLUSIVE: DecodeGroup = { context: -1, weights: "", sequence: -1, apply: () => Promise.resolve(false) };
