import type { BackgroundWork } from "../engine/index.js";
import type { Owner } from "./types.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../library/weightActions.js";
import type { SessionService } from "../sessions/SessionService.js";
import type { WeightActionOutcome } from "../sessions/WeightSwitch.js";

export interface ModelCall {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

export interface ModelTurn {
  text: string;
  calls: ModelCall[];
  adapter: string | null;
  generated: number;
  prompt: number;
  cached: number;
  finishReason: string;
}

export interface WeightOutcome {
  ok: boolean;
  error?: string;
  callId?: string;
  switchMs: number;
  rebuildMs: number;
  rebuiltTokens: number;
  /** Tokens whose KV was kept from earlier work under the same weights (`reuse`). */
  reusedTokens: number;
  /** Of those, tokens restored from a prompt prefix another session computed. */
  sharedTokens: number;
}

export interface GenerateRequest {
  maxTokens: number;
  seed?: number;
  temperature?: number;
  stop?: readonly string[];
  onText?: (chunk: string) => void;
  steer?: { name?: string };
  tokenBias?: Record<string, number>;
  signal?: AbortSignal;
}

/**
 * What a policy needs to drive one trajectory. The real driver runs on a server session (the same operations
 * an MCP client uses); tests of the policy logic use a scripted double.
 */
export interface TrajectoryDriver {
  /** Resident adapters of the library. */
  readonly adapters: readonly string[];
  /** External tools the session may use. */
  readonly tools: readonly string[];
  active(): string | null;
  generate(request: GenerateRequest): Promise<ModelTurn>;
  load(alias: string, opts: { callId?: string; reason?: string }): Promise<WeightOutcome>;
  offload(opts: { callId?: string; handoff?: string; reason?: string }): Promise<WeightOutcome>;
  runTool(call: ModelCall, signal: AbortSignal): Promise<{ ok: boolean; error?: string }>;
  /** Answers a model call with an error the model reads (a guard refusing it). */
  reject(callId: string, message: string): Promise<void>;
  /** A user-role note from the harness. */
  note(text: string): Promise<void>;
  /**
   * The context window: its size, the tokens the history takes as the model reads it now, and what releasing the active
   * adapter would add.
   */
  room(): Promise<{ size: number; used: number; release: number }>;
  /** Elides the oldest external tool results read in full until `needed` tokens are free (or none is left). */
  elide(needed: number): Promise<{ elided: number; callIds: string[]; freedTokens: number }>;
  /** The weights the policy knows come next, in order (null: the base): the engine may catch their caches up ahead. */
  plan(upcoming: readonly (string | null)[]): void;
  /** Evaluation the engine did ahead of time for this trajectory so far. */
  background(): BackgroundWork;
}

/** The driver over a live server session. */
export class SessionDriver implements TrajectoryDriver {
  constructor(
    private readonly sessions: SessionService,
    private readonly owner: Owner,
    readonly sessionId: string,
    readonly adapters: readonly string[],
    private readonly runTool_: (call: ModelCall, signal: AbortSignal) => Promise<{ ok: boolean; error?: string }>,
  ) {}

  get tools(): readonly string[] {
    return this.sessions.get(this.owner, this.sessionId).externalTools;
  }

  active(): string | null {
    return this.sessions.get(this.owner, this.sessionId).activeAdapter;
  }

  async generate(request: GenerateRequest): Promise<ModelTurn> {
    const { result, calls } = await this.sessions.generate(this.owner, this.sessionId, {
      maxTokens: request.maxTokens,
      seed: request.seed,
      temperature: request.temperature,
      stop: request.stop,
      onText: request.onText,
      steerToolCall: request.steer,
      tokenBias: request.tokenBias,
      signal: request.signal,
    });
    return {
      text: result.text,
      calls: calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
      adapter: result.adapter,
      generated: result.tokens.generated,
      prompt: result.tokens.prompt,
      cached: result.tokens.cached,
      finishReason: result.finishReason,
    };
  }

  async load(alias: string, opts: { callId?: string; reason?: string }): Promise<WeightOutcome> {
    return toWeightOutcome(
      await this.sessions.weights.switch(this.owner, this.sessionId, LOAD_LORA, {
        adapter: opts.callId ? undefined : alias,
        callId: opts.callId,
        author: "harness",
        reason: opts.reason,
      }),
    );
  }

  async offload(opts: { callId?: string; handoff?: string; reason?: string }): Promise<WeightOutcome> {
    return toWeightOutcome(
      await this.sessions.weights.switch(this.owner, this.sessionId, OFFLOAD_LORA, {
        callId: opts.callId,
        handoff: opts.handoff,
        author: "harness",
        reason: opts.reason,
      }),
    );
  }

  runTool(call: ModelCall, signal: AbortSignal) {
    return this.runTool_(call, signal);
  }

  reject(callId: string, message: string): Promise<void> {
    return this.sessions.rejectCall(this.owner, this.sessionId, callId, message);
  }

  note(text: string): Promise<void> {
    return this.sessions.addNote(this.owner, this.sessionId, text);
  }

  async room() {
    return this.sessions.contextUsage(this.owner, this.sessionId);
  }

  elide(needed: number) {
    return this.sessions.elideToolResults(this.owner, this.sessionId, needed);
  }

  plan(upcoming: readonly (string | null)[]): void {
    this.sessions.planWeights(this.owner, this.sessionId, upcoming);
  }

  background(): BackgroundWork {
    return this.sessions.backgroundWork(this.owner, this.sessionId);
  }
}

function toWeightOutcome(o: WeightActionOutcome): WeightOutcome {
  return o.ok
    ? {
        ok: true,
        callId: o.callId,
        switchMs: o.switch.switchMs + o.switch.queueMs,
        rebuildMs: o.switch.rebuild.ms,
        rebuiltTokens: o.switch.rebuild.tokens,
        reusedTokens: o.switch.rebuild.reused,
        sharedTokens: o.switch.rebuild.shared,
      }
    : { ok: false, error: o.error, switchMs: 0, rebuildMs: 0, rebuiltTokens: 0, reusedTokens: 0, sharedTokens: 0 };
}
