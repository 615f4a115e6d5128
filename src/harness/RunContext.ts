import { SteeredCallError } from "../engine/index.js";
import { DegenerationWatch, type Degeneration } from "./degenerate.js";
import type { ModelCall, ModelTurn, TrajectoryDriver, WeightOutcome } from "./driver.js";
import type { Trace } from "./trace/Trace.js";
import type { Steering } from "./types.js";

export interface Progress {
  stage: string;
  turn: number;
  message: string;
}

/** A turn with less room than this is not worth generating: the stage ends on the window instead. */
export const MIN_TURN_TOKENS = 16;
/** Tokens a turn adds around its text (end of turn, the next turn's opening) that its own limit does not count. */
const TURN_OVERHEAD_TOKENS = 32;
/** Characters of a harness-written handoff at most (what the stage last wrote). */
const MAX_HANDOFF_CHARS = 2000;

export class RunCancelledError extends Error {
  constructor() {
    super("the run was cancelled");
    this.name = "RunCancelledError";
  }
}

/**
 * The execution mechanism every policy shares: model turns, weight actions and tool calls, each timed into
 * its trace category and recorded as an event. Policies decide what to do; this does it the same way for all.
 */
export class RunContext {
  /** Turns in the current visit of each route ("base" or an alias), for steering. */
  private visitTurns = new Map<string, number>();
  private modelTurns = 0;
  generatedTokens = 0;
  switches = 0;
  /** Loads the model opened with its own load_lora call (the rest the harness prescribed or forced). */
  modelLoads = 0;
  rebuiltTokens = 0;
  reusedTokens = 0;
  /** Time spent waiting on the client (its own tools): not counted against stage and run time budgets. */
  private waitedMs = 0;
  /** The engine's background work for this run as last seen. */
  private backgroundSeen = { tokens: 0, batches: 0, ms: 0 };
  private readonly watch = new DegenerationWatch();
  /** The run's first degenerate model turn (its finish is then `degenerate`), and how many there were. */
  degenerate: Degeneration | undefined;
  degenerateTurns = 0;

  constructor(
    readonly driver: TrajectoryDriver,
    readonly trace: Trace,
    private readonly opts: {
      maxTokensPerTurn: number;
      /** Tokens kept free for the release exchange (harness.contextReserveTokens). */
      contextReserve: number;
      seed?: number;
      steering: readonly Steering[];
      signal: AbortSignal;
      onProgress?: (p: Progress) => void;
      temperature?: number;
      stop?: readonly string[];
      /** The text of a model turn as it is decoded, with the stage and weights ("base" or an alias) serving it. */
      onText?: (chunk: string, stage: string, route: string) => void;
      /** Consulted before each model turn: a value steers that turn into a call (of `name`, when given). */
      forceCall?: () => { name?: string } | undefined;
    },
  ) {}

  /** The budgets' clock: wall time minus the time spent waiting on the client. */
  now(): number {
    return performance.now() - this.waitedMs;
  }

  /** Runs `fn` (a wait on the client) with its time left out of the budgets' clock; returns the time waited. */
  async waitOutside<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
    const started = performance.now();
    try {
      return { value: await fn(), ms: performance.now() - started };
    } finally {
      this.waitedMs += performance.now() - started;
    }
  }

  get contextReserve(): number {
    return this.opts.contextReserve;
  }

  /** The window ended a stage or a turn of this run (its finish is then `context`). */
  windowEnded = false;

  /**
   * Tokens the next turn may generate, keeping `reserve` free, or undefined when not even MIN_TURN_TOKENS
   * fit. Before giving up, older external tool results are elided (keep_tool_result's marker) and the trace
   * says which.
   */
  async roomForTurn(stage: string, reserve: number): Promise<number | undefined> {
    // the reserve, and never less than what this release exchange measures (the closing of the turn too)
    const free = async () => {
      const { size, used, release } = await this.driver.room();
      return size - used - Math.max(reserve, release + TURN_OVERHEAD_TOKENS);
    };
    let room = await free();
    if (room < MIN_TURN_TOKENS) {
      const elided = await this.orchestrate(() => this.driver.elide(MIN_TURN_TOKENS - room));
      if (elided.elided > 0) {
        this.trace.event("elision", {
          stage,
          adapter: this.route(),
          results: elided.elided,
          callIds: elided.callIds,
          freedTokens: elided.freedTokens,
          reason: "context window",
        });
        room = await free();
      }
    }
    // half of it: a turn's text can re-render longer than the tokens it generated (invalid UTF-8 byte runs
    // come back as replacement characters), and the release must still fit after it
    if (room >= MIN_TURN_TOKENS) return Math.floor(room / 2);
    this.windowEnded = true;
    this.trace.event("context_full", { stage, adapter: this.route(), roomBeyondReserve: room, reserve });
    return undefined;
  }

  /**
   * The harness releases the active adapter (a synthetic offload saying why, with what the stage last wrote as
   * its handoff, cut to the room the window has). True when the base is active afterwards.
   */
  async release(
    stage: string,
    reason: string,
    lastText: string,
    reserve: number,
    detail: Record<string, unknown> = {},
  ): Promise<boolean> {
    const { size, used } = await this.driver.room();
    // chars, not tokens: half the room beyond the reserve holds that many characters on any tokenizer we serve
    const handoff =
      lastText.slice(0, Math.max(0, Math.min(MAX_HANDOFF_CHARS, Math.floor((size - used - reserve) / 2)))) || undefined;
    let done = await this.weightAction(
      stage,
      "offload",
      "harness",
      () => this.driver.offload({ handoff, reason }),
      detail,
    );
    if (!done.ok) {
      // without a handoff, and with older tool results elided, the exchange is as short as it gets
      const elided = await this.orchestrate(() => this.driver.elide(this.opts.contextReserve));
      if (elided.elided > 0)
        this.trace.event("elision", {
          stage,
          adapter: this.route(),
          results: elided.elided,
          callIds: elided.callIds,
          freedTokens: elided.freedTokens,
          reason: "room for the release exchange",
        });
      if (handoff || elided.elided > 0)
        done = await this.weightAction(stage, "offload", "harness", () => this.driver.offload({ reason }), detail);
    }
    return done.ok && this.driver.active() === null;
  }

  get signal(): AbortSignal {
    return this.opts.signal;
  }

  route(): string {
    return this.driver.active() ?? "base";
  }

  checkCancelled(): void {
    if (this.opts.signal.aborted) throw new RunCancelledError();
  }

  /** A new visit of a route starts its turn count again. */
  startVisit(route: string): void {
    this.visitTurns.set(route, 0);
  }

  /**
   * Evaluation the engine did ahead of time since the last look (while a tool ran, or between calls): its own
   * trace event, and counted beside the partition of time, never inside the tool's.
   */
  private noteBackground(stage: string): void {
    const seen = this.driver.background();
    const tokens = seen.tokens - this.backgroundSeen.tokens;
    const batches = seen.batches - this.backgroundSeen.batches;
    if (batches <= 0) return;
    const ms = seen.ms - this.backgroundSeen.ms;
    this.backgroundSeen = seen;
    this.trace.background(ms);
    this.trace.event("background", { stage, adapter: this.route(), tokens, batches, ms: round(ms) });
  }

  async modelTurn(stage: string, maxTokens = this.opts.maxTokensPerTurn): Promise<ModelTurn> {
    this.checkCancelled();
    this.noteBackground(stage);
    const route = this.route();
    const turn = (this.visitTurns.get(route) ?? 0) + 1;
    this.visitTurns.set(route, turn);
    const forced = this.opts.forceCall?.();
    let steer = forced
      ? { tool: forced.name, bias: undefined }
      : this.opts.steering.find((s) => s.turn === turn && (s.adapter === "*" || s.adapter === route));
    // counted whether or not anyone follows the progress: the turn's seed and the degenerate verdict name it
    this.modelTurns++;
    this.opts.onProgress?.({ stage, turn: this.modelTurns, message: `${stage}: ${route} turn ${turn}` });
    const generate = () =>
      this.driver.generate({
        maxTokens: Math.max(1, Math.min(maxTokens, this.opts.maxTokensPerTurn)),
        seed: this.opts.seed === undefined ? undefined : this.opts.seed + this.modelTurns,
        temperature: this.opts.temperature,
        stop: this.opts.stop,
        onText: this.opts.onText && ((chunk: string) => this.opts.onText!(chunk, stage, route)),
        steer: steer ? { name: steer.tool } : undefined,
        tokenBias: steer?.bias,
        signal: this.opts.signal,
      });
    let skipped: string | undefined;
    const { value, ms } = await this.trace.measure(
      "model",
      () =>
        generate().catch((err: unknown) => {
          // the run's steering (a demo aid) is best effort: a turn too short for the call runs unsteered; a client's
          // forced tool_choice is not, its error is the client's to see
          if (forced || !steer || !(err instanceof SteeredCallError)) throw err;
          skipped = err.message;
          steer = undefined;
          return generate();
        }),
      route,
    );
    if (skipped) this.trace.event("steering_skipped", { stage, adapter: route, reason: skipped });
    this.checkCancelled();
    this.generatedTokens += value.generated;
    this.trace.event("model_call", {
      stage,
      adapter: route,
      ms: round(ms),
      tokens: { prompt: value.prompt, cached: value.cached, generated: value.generated },
      finish: value.finishReason,
      text: value.text.slice(0, 4000),
      calls: value.calls,
      ...(steer ? { steered: steer.tool ?? true } : {}),
    });
    const verdict = this.watch.judge(stage, value);
    if (verdict) {
      const found: Degeneration = { ...verdict, stage, adapter: route, turn: this.modelTurns };
      this.degenerate ??= found;
      this.degenerateTurns++;
      this.trace.event("degenerate", { ...found });
    }
    return value;
  }

  /** A load or offload; the KV rebuild inside it is moved from adapter control to cache rebuild time. */
  async weightAction(
    stage: string,
    action: "load" | "offload",
    author: "model" | "harness",
    fn: () => Promise<WeightOutcome>,
    detail: Record<string, unknown> = {},
  ): Promise<WeightOutcome> {
    this.checkCancelled();
    this.noteBackground(stage);
    const { value, ms } = await this.trace.measure("adapter_control", fn);
    if (value.rebuildMs > 0) this.trace.move(value.rebuildMs, "adapter_control", "cache_rebuild");
    if (value.ok) this.switches++;
    if (value.ok && action === "load" && author === "model") this.modelLoads++;
    this.rebuiltTokens += value.rebuiltTokens;
    this.reusedTokens += value.reusedTokens;
    this.trace.event("adapter_control", {
      stage,
      action,
      author,
      ok: value.ok,
      ...(value.error ? { error: value.error } : {}),
      callId: value.callId,
      ms: round(ms - value.rebuildMs),
      active: this.driver.active(),
      ...detail,
    });
    if (value.rebuildMs > 0)
      this.trace.event("cache_rebuild", {
        stage,
        adapter: this.route(),
        tokens: value.rebuiltTokens,
        reused: value.reusedTokens,
        shared: value.sharedTokens,
        ms: round(value.rebuildMs),
      });
    return value;
  }

  async tool(stage: string, call: ModelCall): Promise<{ ok: boolean; error?: string }> {
    this.checkCancelled();
    const { value, ms } = await this.trace.measure("external_tool", () => this.driver.runTool(call, this.opts.signal));
    this.trace.event("tool_call", {
      stage,
      adapter: this.route(),
      name: call.name,
      callId: call.id,
      arguments: call.arguments,
      ok: value.ok,
      ...(value.error ? { error: value.error } : {}),
      ms: round(ms),
    });
    return value;
  }

  /** Bookkeeping of the harness itself (guards, notes, refusals), timed as orchestration. */
  async orchestrate<T>(fn: () => Promise<T>): Promise<T> {
    return (await this.trace.measure("orchestration", fn)).value;
  }
}

const round = (n: number) => Number(n.toFixed(3));
