import { WeightSet, type DecodeRoundStats } from "../../../engine/index.js";
import type { WorkLog } from "./WorkLog.js";

/** Where a round's weights are applied: a context (EngineContext). */
export interface RoundTarget {
  readonly id: number;
  /** Applies `weights` to the context; false when they were applied already. Called only between rounds. */
  apply(weights: WeightSet): Promise<boolean>;
}

/**
 * What a decode needs to run: the context it runs in and the weight set applied there while it does. Decodes of one
 * group share llama.cpp batches.
 */
export interface DecodeGroup {
  /** The context; undefined for an exclusive hold (no decode anywhere). */
  readonly context: RoundTarget | undefined;
  readonly weights: WeightSet;
  /** Evaluation ahead of time: it rounds apart from callers', so it never changes a caller's numerics. */
  readonly background: boolean;
  /**
   * The decode's sequence id: a round lets its decodes through in this order, because llama.cpp decodes tokens of
   * several sequences in one piece only when their ids follow each other in the batch (its split over per-sequence
   * caches); otherwise each goes in a piece of its own.
   */
  readonly sequence: number;
}

/** A decode waiting for a round: its group and how many tokens it decodes. */
export interface DecodePart {
  readonly group: DecodeGroup;
  readonly tokens: number;
}

/** Whether two decodes may share a round (and so a batch): tests plant a careless one (localTesting.ts). */
export type SameRound = (a: DecodePart, b: DecodePart) => boolean;

/**
 * The one predicate that decides which decodes batch together (model.batchInvariant true, the default): none. Each
 * decode is a llama.cpp batch of its own, so the pieces a session's tokens are evaluated in and the kernels that
 * evaluate them never depend on who else is decoding. On CPU they would: llama.cpp cuts a batch of several sequences
 * into pieces of equal length per sequence (a prompt decoded beside another session's token starts with a piece of
 * one token, and one query row takes ggml's vector kernel where a piece takes the matrix kernel), and a one-token
 * decode beside other sessions' one-token decodes moved a Gemma 3 270M log-prob by up to 1.05 nats from position 320
 * on (test/engine/load-invariance.test.ts), which quantized activations then carry into the next tokens.
 */
export const decodesAlone: SameRound = () => false;

/**
 * model.batchInvariant false: decodes of one context, the same weight set applied alike, and callers' work apart from
 * work ahead of time batch together (as llama.cpp's server batches only requests whose LoRA sets are equal).
 */
export const mayShareRound: SameRound = (a, b) => sameGroup(a.group, b.group);

function sameGroup(a: DecodeGroup, b: DecodeGroup): boolean {
  return a.context === b.context && a.background === b.background && a.weights.appliesAs(b.weights);
}

interface Waiter extends DecodePart {
  readonly admit: () => void;
  readonly refuse: (err: unknown) => void;
}

/**
 * The engine's one schedule of native decodes, taken in rounds of one batch. A round belongs to one group (a context
 * and the weight set applied in it): the decodes of that group waiting when it starts that may share it (the
 * predicate: none under model.batchInvariant, the default) are let through together, in sequence order, about as many
 * as one batch holds (`batchTokens`: the shortest first, one decode past it at most), so node-llama-cpp decodes their
 * tokens in one batch; the round ends when they have all been decoded. The next round goes to the group whose decode
 * has waited longest; what a round could not hold waits behind the groups already waiting, and a decode arriving for
 * the running group while another group waits joins its next round, so every group waiting gets one batch before any
 * group gets two. Weights change only between rounds, when nothing is being decoded: pending evaluations of a context
 * decode together under whatever set is applied, so a decode can never run under another group's weights. One round
 * at a time across contexts too: contexts running together on the CPU's cores would each get half of them and
 * spin-wait on the rest.
 */
export class DecodeRounds {
  /** The running round's first decode (its group's). */
  private running: DecodePart | undefined;
  /** Resolves once the running group's weights are applied. */
  private ready: Promise<void> = Promise.resolve();
  private holders = 0;
  /** Tokens the running round has let through. */
  private roundTokens = 0;
  private readonly waiting: Waiter[] = [];
  private readonly counts: DecodeRoundStats = { rounds: 0, decodes: 0, weightChanges: 0 };

  /**
   * `log` gets every decode's wait and run, marked as a caller's or as evaluation ahead of time; `batchTokens`: the
   * tokens one batch holds.
   */
  constructor(
    private readonly log: WorkLog,
    private readonly batchTokens: number,
    private readonly sameRound: SameRound = mayShareRound,
  ) {}

  /** Since the engine started: rounds, decodes, and rounds that changed a context's weights. */
  get stats(): DecodeRoundStats {
    return { ...this.counts };
  }

  /**
   * Waits for a round of `group` (its weights applied in its context) for a decode of `tokens` tokens and returns the
   * function that ends the decode's part in it. Rejects when the weights could not be applied; the round then goes to
   * the next group. The log marks evaluation ahead of time apart, so a caller's wait for it can be checked.
   */
  async enter(group: DecodeGroup, tokens: number): Promise<() => void> {
    const queuedAt = performance.now();
    await this.admit(group, tokens);
    const startedAt = performance.now();
    this.counts.decodes++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.log.record({
        context: group.context?.id ?? -1,
        background: group.background,
        queuedAt,
        startedAt,
        endedAt: performance.now(),
      });
      this.leave();
    };
  }

  /** Runs `fn` in a round of its own: no decode in flight anywhere (detaching an adapter, freeing its memory). */
  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    await this.admit(EXCLUSIVE, 0);
    try {
      return await fn();
    } finally {
      this.leave();
    }
  }

  /** Resolves once `group` holds a part in the running round (its weights applied). */
  private async admit(group: DecodeGroup, tokens: number): Promise<void> {
    const joins =
      this.running &&
      this.sameRound(this.running, { group, tokens }) &&
      this.waiting.length === 0 &&
      this.roundTokens + tokens <= this.batchTokens;
    if (!joins && this.running) {
      return new Promise<void>((admit, refuse) => this.waiting.push({ group, tokens, admit, refuse }));
    }
    if (joins) {
      this.holders++;
      this.roundTokens += tokens;
    } else this.start([{ group, tokens }]);
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
    const mine = [next, ...this.waiting.filter((w) => w !== next && this.sameRound(w, next))];
    // the shortest first (generation's one-token decodes), then the longer ones (prompt pieces) while the batch holds
    // them, and one beyond it: every round moves every waiting turn and at least one prompt forward (node-llama-cpp
    // then decodes the overflow in a second, short batch)
    const round: Waiter[] = [];
    let tokens = 0;
    let overflowed = false;
    for (const w of [...mine].sort((a, b) => a.tokens - b.tokens || a.group.sequence - b.group.sequence)) {
      const fits = tokens + w.tokens <= this.batchTokens;
      if (!fits && overflowed) continue;
      overflowed ||= !fits;
      round.push(w);
      tokens += w.tokens;
    }
    round.sort((a, b) => a.group.sequence - b.group.sequence);
    // what the batch could not hold goes behind every other group waiting
    const left = mine.filter((w) => !round.includes(w));
    const others = this.waiting.filter((w) => !mine.includes(w));
    this.waiting.splice(0, this.waiting.length, ...others, ...left);
    this.start(round, round);
  }

  /**
   * Starts a round of one group's decodes (`parts`: each decode's tokens); `waiters` are let in once its weights are
   * applied.
   */
  private start(parts: readonly { group: DecodeGroup; tokens: number }[], waiters: readonly Waiter[] = []): void {
    const group = parts[0]!.group;
    this.running = parts[0];
    this.holders = parts.length;
    this.roundTokens = parts.reduce((sum, p) => sum + p.tokens, 0);
    if (group !== EXCLUSIVE) this.counts.rounds++;
    const applied = group.context ? group.context.apply(group.weights) : Promise.resolve(false);
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
const EXCLUSIVE: DecodeGroup = { context: undefined, weights: WeightSet.of("", []), background: false, sequence: -1 };
