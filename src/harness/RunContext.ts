import type { ModelCall, ModelTurn, TrajectoryDriver, WeightOutcome } from "./driver.js";
import type { Trace } from "./trace/Trace.js";
import type { Steering } from "./types.js";

export interface Progress {
  stage: string;
  turn: number;
  message: string;
}

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
  rebuiltTokens = 0;
  reusedTokens = 0;
  /** Time spent waiting on the client (its own tools): not counted against stage and run time budgets. */
  private waitedMs = 0;

  constructor(
    readonly driver: TrajectoryDriver,
    readonly trace: Trace,
    private readonly opts: {
      maxTokensPerTurn: number;
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

  async modelTurn(stage: string, maxTokens = this.opts.maxTokensPerTurn): Promise<ModelTurn> {
    this.checkCancelled();
    const route = this.route();
    const turn = (this.visitTurns.get(route) ?? 0) + 1;
    this.visitTurns.set(route, turn);
    const forced = this.opts.forceCall?.();
    const steer = forced ? { tool: forced.name, bias: undefined } : this.opts.steering.find((s) => s.turn === turn && (s.adapter === "*" || s.adapter === route));
    this.opts.onProgress?.({ stage, turn: ++this.modelTurns, message: `${stage}: ${route} turn ${turn}` });
    const { value, ms } = await this.trace.measure(
      "model",
      () =>
        this.driver.generate({
          maxTokens: Math.max(1, Math.min(maxTokens, this.opts.maxTokensPerTurn)),
          seed: this.opts.seed === undefined ? undefined : this.opts.seed + this.modelTurns,
          temperature: this.opts.temperature,
          stop: this.opts.stop,
          onText: this.opts.onText && ((chunk: string) => this.opts.onText!(chunk, stage, route)),
          steer: steer ? { name: steer.tool } : undefined,
          tokenBias: steer?.bias,
          signal: this.opts.signal,
        }),
      route,
    );
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
    return value;
  }

  /** A load or offload; the KV rebuild inside it is moved from adapter control to cache rebuild time. */
  async weightAction(stage: string, action: "load" | "offload", author: "model" | "harness", fn: () => Promise<WeightOutcome>, detail: Record<string, unknown> = {}): Promise<WeightOutcome> {
    this.checkCancelled();
    const { value, ms } = await this.trace.measure("adapter_control", fn);
    if (value.rebuildMs > 0) this.trace.move(value.rebuildMs, "adapter_control", "cache_rebuild");
    if (value.ok) this.switches++;
    this.rebuiltTokens += value.rebuiltTokens;
    this.reusedTokens += value.reusedTokens;
    this.trace.event("adapter_control", { stage, action, author, ok: value.ok, ...(value.error ? { error: value.error } : {}), callId: value.callId, ms: round(ms - value.rebuildMs), active: this.driver.active(), ...detail });
    if (value.rebuildMs > 0) this.trace.event("cache_rebuild", { stage, adapter: this.route(), tokens: value.rebuiltTokens, reused: value.reusedTokens, ms: round(value.rebuildMs) });
    return value;
  }

  async tool(stage: string, call: ModelCall): Promise<{ ok: boolean; error?: string }> {
    this.checkCancelled();
    const { value, ms } = await this.trace.measure("external_tool", () => this.driver.runTool(call, this.opts.signal));
    this.trace.event("tool_call", { stage, adapter: this.route(), name: call.name, callId: call.id, arguments: call.arguments, ok: value.ok, ...(value.error ? { error: value.error } : {}), ms: round(ms) });
    return value;
  }

  /** Bookkeeping of the harness itself (guards, notes, refusals), timed as orchestration. */
  async orchestrate<T>(fn: () => Promise<T>): Promise<T> {
    return (await this.trace.measure("orchestration", fn)).value;
  }
}

const round = (n: number) => Number(n.toFixed(3));
