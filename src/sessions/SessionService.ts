import type { BackgroundWork, Engine, EngineSession, FunctionSpec, GenerateResult } from "../engine/index.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { Logger } from "../log.js";
import type { ExternalTool, ToolOutcome } from "../externalTools/ExternalTool.js";
import { DEFAULT_STAGE_BUDGET, type StageBudget } from "../budgets/budgets.js";
import { ContextWindow } from "./ContextWindow.js";
import { LimitError, PendingCallsError } from "./errors.js";
import type { InputField } from "./inputWindow.js";
import { newCallId, newId } from "./exchanges.js";
import type { HistoryMessage, ToolCallRecord } from "./history.js";
import { modelFunctions } from "./modelFunctions.js";
import { WEIGHT_ACTIONS } from "../library/weightActions.js";
import { Session } from "./Session.js";
import { SessionRegistry, type SessionsConfig } from "./SessionRegistry.js";
import { answerCall, answerClientCalls, rejectCall, runExternalTool } from "./toolExchanges.js";
import { WeightSwitch, type BudgetRelease } from "./WeightSwitch.js";
import { WorkQueue } from "./WorkQueue.js";

/** What sessions use of the running server (a `Runtime` is one): the engine, the adapter library, the logger. */
export interface SessionRuntime {
  engine: Engine;
  library: AdapterLibrary;
  logger: Logger;
}

export interface CreateSessionInput {
  task: string;
  system?: string;
  /** External tools this session may use (default: all the server offers). */
  tools?: string[];
  /**
   * Fixed weights for the whole session (comparison modes: one adapter, or several applied together as a
   * static merge). The weight actions are then neither documented nor callable.
   */
  fixedAdapters?: string[];
  /**
   * The capabilities the load_lora docs list (default: every one of the library). A hard run lists its workflow's:
   * a capability added to the library then leaves the prompts of the workflows that do not use it unchanged.
   */
  capabilities?: readonly string[];
  /**
   * Functions the client declares and executes itself (an OpenAI request's `tools`): documented and callable
   * beside the server's tools; their calls are answered with `answerClientCalls`.
   */
  clientTools?: Readonly<Record<string, FunctionSpec>>;
  /**
   * An earlier conversation: messages before the task, and after it (a request whose last user message is the task).
   */
  history?: { before?: HistoryMessage[]; after?: HistoryMessage[] };
  /** A run's own stage budgets: the server-side release follows them too (over the manifest and config). */
  stageBudget?: Partial<StageBudget>;
}

export interface GenerateInput {
  maxTokens?: number;
  temperature?: number;
  seed?: number;
  topLogprobs?: number;
  tokenBias?: Record<string, number>;
  steerToolCall?: { name?: string };
  signal?: AbortSignal;
  onProgress?: (generatedTokens: number) => void;
  /** The response's text as it is decoded. */
  onText?: (chunk: string) => void;
  stop?: readonly string[];
}

export interface GenerateOutcome {
  result: GenerateResult;
  /** The stage budget ran out before this turn: the server released the adapter itself (a recorded exchange). */
  released?: BudgetRelease;
  /** The recorded calls with the ids a client answers them by. */
  calls: ToolCallRecord[];
  recorded: boolean;
}

/**
 * Who may share the KV of a session's prompt prefix (the system prompt and function docs): the server's own
 * prompt and tools are the same text for everyone, so everyone may; a prompt or tool a client wrote stays within
 * that client's identity, so no timing tells another client what it contains.
 */
function promptScope(owner: string, serverAuthored: boolean): string {
  return serverAuthored ? "server" : `identity:${owner}`;
}

/**
 * The operations on sessions, independent of MCP: create, generate, switch weights, record tool results,
 * close. Each runs under its session's lock; model work also passes the bounded work queue. The jobs live
 * beside it: `SessionRegistry` (who owns what, limits, expiry), `WeightSwitch` (the state rule and every
 * switch, used directly as `weights`), `toolExchanges` (external and client tools, answered calls), `ContextWindow`
 * (what fits, what is used, eliding old tool results).
 */
export class SessionService {
  private readonly queue: WorkQueue;
  private readonly registry: SessionRegistry;
  private readonly window: ContextWindow;
  /** load_lora, offload_lora and the server-side release: the weight switch of every session. */
  readonly weights: WeightSwitch;

  constructor(
    private readonly runtime: SessionRuntime,
    private readonly config: SessionsConfig,
    private readonly defaultSystem: string,
    private readonly externalTools: () => Readonly<Record<string, FunctionSpec>> = () => ({}),
    /** The stage budget of an adapter (manifest entry > config > defaults), enforced in client-driven generate. */
    stageBudget: (alias: string) => StageBudget = () => DEFAULT_STAGE_BUDGET,
    private readonly logger: Logger = runtime.logger,
  ) {
    const capacity = runtime.engine.capacity;
    this.queue = new WorkQueue({
      maxPending: config.maxQueuedGenerations,
      maxPendingPerClient: config.maxQueuedPerClient,
      concurrency: capacity.concurrentCalls,
    });
    this.registry = new SessionRegistry(config, capacity.sessions, logger);
    this.weights = new WeightSwitch(this.registry, runtime.library, this.queue, stageBudget, logger);
    this.window = new ContextWindow(runtime, logger);
  }

  /**
   * Refuses input from outside that cannot fit a session's context window (`InputTooLongError` naming the field),
   * before anything tokenizes it whole: an oversized task or message costs its client an error, not every client a
   * blocked server.
   */
  refuseUnfittable(fields: readonly InputField[]): Promise<void> {
    return this.window.refuseUnfittable(fields);
  }

  async create(owner: string, input: CreateSessionInput): Promise<Session> {
    this.registry.admit(owner);
    const offered = this.externalTools();
    const unknown = (input.tools ?? []).filter((t) => !(t in offered));
    if (unknown.length)
      throw new LimitError(
        `tools: unknown external tool(s) ${unknown.join(", ")}; available: ${Object.keys(offered).join(", ") || "(none)"}`,
      );
    const toolNames = input.tools ?? Object.keys(offered);
    const external = Object.fromEntries(toolNames.map((t) => [t, offered[t]!]));
    const fixed = input.fixedAdapters;
    const unknownAdapters = (fixed ?? []).filter((a) => !this.runtime.library.get(a)?.info);
    if (unknownAdapters.length)
      throw new LimitError(
        `unknown adapter(s) ${unknownAdapters.join(", ")}; the library has: ${this.runtime.library.aliases().join(", ")}`,
      );
    const clientTools = input.clientTools ?? {};
    const clashing = Object.keys(clientTools).filter((t) => t in offered || WEIGHT_ACTIONS.has(t));
    if (clashing.length)
      throw new LimitError(
        `tools: ${clashing.join(", ")} is a function of this server; name the client's tools differently`,
      );
    const functions = {
      ...(fixed ? external : modelFunctions(this.runtime.library, external, input.capabilities)),
      ...clientTools,
    };
    const system = input.system ?? this.defaultSystem;
    const session = await this.registry.add(owner, async () => {
      const engineSession: EngineSession = await this.runtime.engine.openSession({
        adapters: fixed ?? [],
        promptScope: promptScope(owner, system === this.defaultSystem && !Object.keys(clientTools).length),
      });
      return new Session(
        newId("s_", 18),
        owner,
        input.task,
        engineSession,
        functions,
        toolNames,
        {
          keepToolResults: this.config.keepToolResults,
          weightActions: !fixed,
          ...(input.stageBudget ? { stageBudget: input.stageBudget } : {}),
        },
        system,
        {
          clientTools: Object.keys(clientTools),
          ...input.history,
        },
      );
    });
    session.anticipateNext(this.runtime.library.aliases());
    this.logger.info({ session: session.id, owner, tools: toolNames }, "session created");
    return session;
  }

  /** The caller's session; someone else's is reported exactly like a missing one. */
  get(owner: string, id: string): Session {
    return this.registry.get(owner, id);
  }

  list(owner: string): Session[] {
    return this.registry.list(owner);
  }

  async generate(owner: string, id: string, input: GenerateInput): Promise<GenerateOutcome> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      session.touch();
      const pending = session.pendingCalls();
      if (pending.length) throw new PendingCallsError(pending);
      const released = await this.weights.enforceStageBudget(session);
      // the call's queue time is all of its wait: the work queue's, then the engine's for its context
      const result = await this.queue.run(session.owner, async (waitedMs) => {
        const turn = await session.engine.generate(session.conversation(), {
          callable: session.callable(),
          maxTokens: input.maxTokens ?? this.config.defaultMaxTokens,
          temperature: input.temperature,
          seed: input.seed,
          topLogprobs: input.topLogprobs,
          tokenBias: input.tokenBias,
          steerToolCall: input.steerToolCall,
          signal: input.signal,
          onToken: input.onProgress,
          onText: input.onText,
          stop: input.stop,
        });
        return { ...turn, timings: { ...turn.timings, queueMs: waitedMs + turn.timings.queueMs } };
      });
      // A cancelled turn is not part of the trajectory: the history stays as it was.
      if (result.finishReason === "cancelled")
        return { result, calls: [], recorded: false, ...(released ? { released } : {}) };
      const calls: ToolCallRecord[] = result.calls.map((c) => ({
        id: newCallId(),
        name: c.name,
        arguments: (c.arguments ?? {}) as Record<string, unknown>,
        raw: c.raw,
      }));
      session.append({
        role: "assistant",
        content: result.text,
        adapter: result.adapter,
        author: "model",
        toolCalls: calls,
      });
      session.stage?.recordTurn(
        result.tokens.generated,
        calls.some((c) => !WEIGHT_ACTIONS.has(c.name)),
      );
      // the calls run now: the turn is settled
      if (calls.length) session.anticipateNext(this.runtime.library.aliases());
      return { result, calls, recorded: true, ...(released ? { released } : {}) };
    });
  }

  /**
   * Records a turn written for the model, not by it (the training oracle's teaching turn), exactly as a
   * generated turn is recorded: under the active weights, its calls pending until answered.
   */
  async recordTurn(
    owner: string,
    id: string,
    turn: { text: string; calls: readonly { name: string; arguments: Record<string, unknown> }[] },
  ): Promise<ToolCallRecord[]> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      session.touch();
      const pending = session.pendingCalls();
      if (pending.length) throw new PendingCallsError(pending);
      const calls: ToolCallRecord[] = turn.calls.map((c) => ({
        id: newCallId(),
        name: c.name,
        arguments: c.arguments,
      }));
      session.append({
        role: "assistant",
        content: turn.text,
        adapter: session.activeAdapter,
        author: "model",
        toolCalls: calls,
      });
      // a turn of the stage all the same, but no generated tokens: the model wrote none
      session.stage?.recordTurn(
        0,
        calls.some((c) => !WEIGHT_ACTIONS.has(c.name)),
      );
      if (calls.length) session.anticipateNext(this.runtime.library.aliases());
      return calls;
    });
  }

  /** See `toolExchanges.runExternalTool`: the answer to the model's call, or a prescribed exchange. */
  async runExternalTool(
    owner: string,
    id: string,
    input: { tool: ExternalTool; args: Record<string, unknown>; callId?: string; signal: AbortSignal },
  ): Promise<ToolOutcome & { callId: string }> {
    return runExternalTool(this.get(owner, id), input);
  }

  /** Answers a pending call of the model with an error of the client's own. */
  async answerCall(
    owner: string,
    id: string,
    callId: string,
    error: string,
  ): Promise<{ callId: string; name: string }> {
    return answerCall(this.get(owner, id), callId, error);
  }

  /** Records the client's results of the model's calls to client-declared tools (`waitedMs` paused in the stage). */
  async answerClientCalls(
    owner: string,
    id: string,
    results: readonly { callId: string; content: string }[],
    waitedMs: number,
  ): Promise<void> {
    return answerClientCalls(this.get(owner, id), results, waitedMs);
  }

  /** Answers a pending model call with an error the model reads (a harness guard refusing it). */
  async rejectCall(owner: string, id: string, callId: string, message: string): Promise<void> {
    return rejectCall(this.get(owner, id), callId, message);
  }

  /** The harness's plan of the weights to come (see `Session.plan`): the engine catches their caches up ahead. */
  planWeights(owner: string, id: string, upcoming: readonly (string | null)[]): void {
    const session = this.get(owner, id);
    session.plan(upcoming);
    session.anticipateNext(this.runtime.library.aliases());
  }

  /** Evaluation the engine did ahead of time for the session (kept apart from the time anyone waited). */
  backgroundWork(owner: string, id: string): BackgroundWork {
    return this.get(owner, id).engine.backgroundWork();
  }

  /**
   * The session's context window: its size, the tokens its history takes as the model reads it now, and what
   * releasing the active adapter would add (a harness-made release exchange; 0 on the base).
   */
  contextUsage(owner: string, id: string): { size: number; used: number; release: number } {
    return this.window.usage(this.get(owner, id));
  }

  /**
   * Makes room in the window: the oldest external tool results still read in full become the
   * keep_tool_result marker, one at a time, until `needed` tokens are freed or none is left.
   */
  async elideToolResults(
    owner: string,
    id: string,
    needed: number,
  ): Promise<{ elided: number; callIds: string[]; freedTokens: number }> {
    return this.window.elideToolResults(this.get(owner, id), needed);
  }

  /** Counts for the status page: sessions by state, the work queue. */
  overview(): { sessions: Session[]; queue: { pending: number; running: number; maxPending: number } } {
    return { sessions: this.registry.all(), queue: this.queue.stats() };
  }

  /** Adds a user-role message (a harness note such as a coverage reminder). */
  async addNote(owner: string, id: string, text: string): Promise<void> {
    const session = this.get(owner, id);
    await session.lock.run(async () => {
      const pending = session.pendingCalls();
      if (pending.length) throw new PendingCallsError(pending);
      session.append({ role: "user", content: text });
    });
  }

  async close(owner: string, id: string): Promise<void> {
    await this.registry.close(owner, id);
  }

  /** Closes every session of `owner` (an identity nobody can present any more). */
  async closeOwnedBy(owner: string): Promise<void> {
    await this.registry.closeOwnedBy(owner);
  }

  async dispose(): Promise<void> {
    await this.registry.dispose();
  }
}
