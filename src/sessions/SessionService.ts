import { randomBytes } from "node:crypto";
import { EngineError, type EngineSession, type FunctionSpec, type GenerateResult, type SwitchReport } from "../engine/index.js";
import type { Config } from "../config/config.js";
import type { Logger } from "../log.js";
import type { Runtime } from "../runtime/startRuntime.js";
import { parseArguments, type ExternalTool, type ToolOutcome } from "../tools/ExternalTool.js";
import { InvalidArgumentsError, LimitError, PendingCallsError, SessionNotFoundError, UnknownCallError } from "./errors.js";
import type { Author, HistoryMessage, ToolCallRecord } from "./history.js";
import { DEFAULT_STAGE_BUDGET, layered, type StageBudget } from "../budgets/budgets.js";
import { LOAD_LORA, modelFunctions, OFFLOAD_LORA, WEIGHT_ACTIONS } from "./modelFunctions.js";
import { callMismatch, stateRuleProblem } from "./stateRule.js";
import { StageUsage } from "./StageUsage.js";
import { Session } from "./Session.js";
import { WorkQueue } from "./WorkQueue.js";

export type SessionsConfig = Config["sessions"];

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
   * Functions the client declares and executes itself (an OpenAI request's `tools`): documented and callable
   * beside the server's tools; their calls are answered with `answerClientCalls`.
   */
  clientTools?: Readonly<Record<string, FunctionSpec>>;
  /** An earlier conversation: messages before the task, and after it (a request whose last user message is the task). */
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
  released?: { adapter: string; reason: string; switch: SwitchReport };
  /** The recorded calls with the ids a client answers them by. */
  calls: ToolCallRecord[];
  recorded: boolean;
}

export interface WeightActionInput {
  adapter?: string;
  callId?: string;
  handoff?: string;
  author?: Exclude<Author, "model">;
  /** Why the harness performs this action itself; appended to the recorded result so the next weights read it. */
  reason?: string;
}

export type WeightActionOutcome =
  | { ok: true; action: typeof LOAD_LORA | typeof OFFLOAD_LORA; previous: string | null; active: string | null; callId: string; message: string; switch: SwitchReport }
  | { ok: false; error: string; recordedForCall: string | null };

const newId = (prefix: string, bytes: number) => `${prefix}${randomBytes(bytes).toString("base64url")}`;

/**
 * The operations on sessions, independent of MCP: create, generate, switch weights, record tool results,
 * close. Each runs under its session's lock; model work also passes the bounded work queue.
 */
export class SessionService {
  private readonly sessions = new Map<string, Session>();
  /** Sessions being opened, per owner (counted against the limits). */
  private readonly opening = new Map<string, number>();
  private readonly queue: WorkQueue;
  private readonly maxSlotsPerClient: number;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly runtime: Runtime,
    private readonly config: SessionsConfig,
    private readonly defaultSystem: string,
    private readonly externalTools: () => Readonly<Record<string, FunctionSpec>> = () => ({}),
    /** The stage budget of an adapter (manifest entry > config > defaults), enforced in client-driven generate. */
    private readonly stageBudget: (alias: string) => StageBudget = () => DEFAULT_STAGE_BUDGET,
    private readonly logger: Logger = runtime.logger,
  ) {
    const capacity = runtime.engine.capacity;
    this.queue = new WorkQueue({ maxPending: config.maxQueuedGenerations, maxPendingPerClient: config.maxQueuedPerClient, concurrency: capacity.contexts });
    // one below the engine's total: another client always finds a slot, and a lone client (stdio) keeps nearly all
    this.maxSlotsPerClient = config.maxSlotsPerClient ?? Math.max(1, capacity.sessions - 1);
    this.sweeper = setInterval(() => void this.expireIdle(), Math.min(60_000, (config.idleMinutes * 60_000) / 4));
    this.sweeper.unref();
  }

  async create(owner: string, input: CreateSessionInput): Promise<Session> {
    // sessions still being opened count too, so concurrent creates cannot pass the limits together
    const opening = this.opening.get(owner) ?? 0;
    const mine = [...this.sessions.values()].filter((s) => s.owner === owner).length + opening;
    if (this.sessions.size + this.openingTotal() >= this.config.maxSessions) throw new LimitError(`the server holds its maximum of ${this.config.maxSessions} sessions (sessions.maxSessions); close one (close_session) or wait for idle ones to expire`);
    if (mine >= this.config.maxSessionsPerClient) throw new LimitError(`this client holds its maximum of ${this.config.maxSessionsPerClient} sessions (sessions.maxSessionsPerClient); close one with close_session`);
    // every session holds one of the engine's sequences while it is open
    if (mine >= this.maxSlotsPerClient) throw new LimitError(`this client holds ${mine} of the engine's ${this.runtime.engine.capacity.sessions} session slots, its share (sessions.maxSlotsPerClient = ${this.maxSlotsPerClient}); close one with close_session`);
    const offered = this.externalTools();
    const unknown = (input.tools ?? []).filter((t) => !(t in offered));
    if (unknown.length) throw new LimitError(`tools: unknown external tool(s) ${unknown.join(", ")}; available: ${Object.keys(offered).join(", ") || "(none)"}`);
    const toolNames = input.tools ?? Object.keys(offered);
    const external = Object.fromEntries(toolNames.map((t) => [t, offered[t]!]));
    const fixed = input.fixedAdapters;
    const unknownAdapters = (fixed ?? []).filter((a) => !this.runtime.library.get(a)?.info);
    if (unknownAdapters.length) throw new LimitError(`unknown adapter(s) ${unknownAdapters.join(", ")}; the library has: ${this.runtime.library.aliases().join(", ")}`);
    const clientTools = input.clientTools ?? {};
    const clashing = Object.keys(clientTools).filter((t) => t in offered || WEIGHT_ACTIONS.has(t));
    if (clashing.length) throw new LimitError(`tools: ${clashing.join(", ")} is a function of this server; name the client's tools differently`);
    const functions = { ...(fixed ? external : modelFunctions(this.runtime.library, external)), ...clientTools };
    this.opening.set(owner, opening + 1);
    let engineSession: EngineSession;
    try {
      engineSession = await this.runtime.engine.openSession({ adapters: fixed ?? [] });
    } finally {
      const left = (this.opening.get(owner) ?? 1) - 1;
      if (left > 0) this.opening.set(owner, left);
      else this.opening.delete(owner);
    }
    const session = new Session(newId("s_", 18), owner, input.task, engineSession, functions, toolNames, { keepToolResults: this.config.keepToolResults, weightActions: !fixed, ...(input.stageBudget ? { stageBudget: input.stageBudget } : {}) }, input.system ?? this.defaultSystem, {
      clientTools: Object.keys(clientTools),
      ...input.history,
    });
    this.sessions.set(session.id, session);
    this.logger.info({ session: session.id, owner, tools: toolNames }, "session created");
    return session;
  }

  private openingTotal(): number {
    return [...this.opening.values()].reduce((a, b) => a + b, 0);
  }

  /** The caller's session; someone else's is reported exactly like a missing one. */
  get(owner: string, id: string): Session {
    const session = this.sessions.get(id);
    if (!session || session.owner !== owner) throw new SessionNotFoundError(id);
    return session;
  }

  list(owner: string): Session[] {
    return [...this.sessions.values()].filter((s) => s.owner === owner);
  }

  async generate(owner: string, id: string, input: GenerateInput): Promise<GenerateOutcome> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      session.touch();
      const pending = session.pendingCalls();
      if (pending.length) throw new PendingCallsError(pending);
      const released = await this.enforceStageBudget(session);
      const result = await this.queue.run(session.owner, () =>
        session.engine.generate(session.conversation(), {
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
        }),
      );
      // A cancelled turn is not part of the trajectory: the history stays as it was.
      if (result.finishReason === "cancelled") return { result, calls: [], recorded: false, ...(released ? { released } : {}) };
      const calls: ToolCallRecord[] = result.calls.map((c) => ({ id: newId("call_", 9), name: c.name, arguments: (c.arguments ?? {}) as Record<string, unknown>, raw: c.raw }));
      session.append({ role: "assistant", content: result.text, adapter: result.adapter, author: "model", toolCalls: calls });
      session.stage?.recordTurn(result.tokens.generated, calls.some((c) => !WEIGHT_ACTIONS.has(c.name)));
      return { result, calls, recorded: true, ...(released ? { released } : {}) };
    });
  }

  async loadLora(owner: string, id: string, input: WeightActionInput): Promise<WeightActionOutcome> {
    return this.weightAction(owner, id, LOAD_LORA, input);
  }

  async offloadLora(owner: string, id: string, input: WeightActionInput): Promise<WeightActionOutcome> {
    return this.weightAction(owner, id, OFFLOAD_LORA, input);
  }

  /**
   * Runs an external tool for a session and records the exchange: as the result of the model's call
   * `callId`, or as a prescribed exchange (a call attributed to the client, then its result). A failing
   * tool is a recorded error result, never a broken session.
   */
  async runExternalTool(owner: string, id: string, input: { tool: ExternalTool; args: Record<string, unknown>; callId?: string; signal: AbortSignal }): Promise<ToolOutcome & { callId: string }> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      session.touch();
      const { tool } = input;
      if (!session.externalTools.includes(tool.name)) throw new LimitError(`${tool.name} is not enabled in this session (its tools: ${session.externalTools.join(", ") || "none"})`);
      const call = input.callId ? this.pendingCall(session, input.callId) : undefined;
      if (!call && session.pendingCalls().length) throw new PendingCallsError(session.pendingCalls());
      // answering a call executes the model's own arguments; any the client passes override them
      const args = call ? { ...call.arguments, ...input.args } : input.args;
      const parsed = parseArguments(tool, args);
      // a prescribed call with bad arguments is the client's to fix: nothing is recorded
      if (!parsed.ok && !call) throw new InvalidArgumentsError(parsed.error);
      const answered = call ?? { id: newId("call_", 9), name: tool.name, arguments: args };
      const outcome: ToolOutcome =
        call && call.name !== tool.name
          ? { ok: false, error: `${tool.name} refused: call ${call.id} is a ${call.name} call; it must be answered by ${call.name}` }
          : !parsed.ok
            ? parsed
            : await runWithTimeout(tool, parsed.args, input.signal);
      const result: HistoryMessage = { role: "tool", callId: answered.id, name: answered.name, content: outcome.ok ? outcome.forModel : outcome.error, isError: !outcome.ok, internal: false };
      if (call) session.append(result);
      else session.append({ role: "assistant", content: "", adapter: session.activeAdapter, author: "client", toolCalls: [answered] }, result);
      session.stage?.recordToolCall();
      return { ...outcome, callId: answered.id };
    });
  }

  /**
   * Answers a pending call of the model with an error of the client's own (the model reads it next turn):
   * any call can be answered, whatever its name or arguments.
   */
  async answerCall(owner: string, id: string, callId: string, error: string): Promise<{ callId: string; name: string }> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      session.touch();
      const call = this.pendingCall(session, callId);
      session.append({ role: "tool", callId: call.id, name: call.name, content: error, isError: true, internal: WEIGHT_ACTIONS.has(call.name) });
      return { callId: call.id, name: call.name };
    });
  }

  /**
   * The session's context window: its size, the tokens its history takes as the model reads it now, and what
   * releasing the active adapter would add (a harness-made release exchange; 0 on the base).
   */
  contextUsage(owner: string, id: string): { size: number; used: number; release: number } {
    const session = this.get(owner, id);
    const used = session.engine.promptTokens(session.conversation());
    const active = session.activeAdapter;
    if (active === null || !session.settings.weightActions) return { size: session.engine.contextSize, used, release: 0 };
    const call: ToolCallRecord = { id: "call_measure", name: OFFLOAD_LORA, arguments: {} };
    const exchange: HistoryMessage[] = [
      { role: "assistant", content: "", adapter: active, author: "harness", toolCalls: [call] },
      toolResult(call, `${this.exchangeMessage(OFFLOAD_LORA, active)} [stage ended by the harness: the context window is full]`, false),
    ];
    return { size: session.engine.contextSize, used, release: session.engine.promptTokens(session.conversation([...session.history, ...exchange])) - used };
  }

  /**
   * Makes room in the window: the oldest external tool results still read in full become the
   * keep_tool_result marker, one at a time, until `needed` tokens are freed or none is left.
   */
  async elideToolResults(owner: string, id: string, needed: number): Promise<{ elided: number; callIds: string[]; freedTokens: number }> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      const before = session.engine.promptTokens(session.conversation());
      const callIds: string[] = [];
      let freed = 0;
      for (let result = session.oldestVerbatimResult(); result && freed < needed; result = session.oldestVerbatimResult()) {
        session.elide(result);
        callIds.push(result.callId);
        freed = before - session.engine.promptTokens(session.conversation());
      }
      if (callIds.length) this.logger.info({ session: session.id, results: callIds.length, freedTokens: freed }, "older tool results elided to make room in the context window");
      return { elided: callIds.length, callIds, freedTokens: freed };
    });
  }

  /**
   * Client-driven mode follows the same stage budgets as the harness: when the active adapter's stage has
   * spent one, the server releases it itself (an exchange attributed to the harness, saying why) before the
   * next turn. Called under the session lock.
   */
  private async enforceStageBudget(session: Session): Promise<GenerateOutcome["released"]> {
    const stage = session.stage;
    if (!stage || !session.settings.weightActions) return undefined;
    const reason = stage.exhausted(layered(this.stageBudget(stage.adapter), session.settings.stageBudget));
    if (!reason) return undefined;
    const answered: ToolCallRecord = { id: newId("call_", 9), name: OFFLOAD_LORA, arguments: {} };
    const message = `${this.exchangeMessage(OFFLOAD_LORA, stage.adapter)} [stage ended by the server: ${reason}]`;
    const exchange: HistoryMessage[] = [
      { role: "assistant", content: "", adapter: stage.adapter, author: "harness", toolCalls: [answered] },
      toolResult(answered, message, false),
    ];
    const report = await this.switchWith(session, null, exchange);
    this.logger.info({ session: session.id, adapter: stage.adapter, reason }, "stage budget spent: adapter released by the server");
    return { adapter: stage.adapter, reason, switch: report };
  }

  /**
   * Switches the session's weights with `exchange` as the history's next messages, then commits them: only
   * a switch that succeeded leaves a trace in the history. Called under the session lock.
   */
  private async switchWith(session: Session, target: string | null, exchange: HistoryMessage[]): Promise<SwitchReport> {
    const from = session.activeAdapter;
    const report = await this.queue.run(session.owner, () => session.engine.switchAdapter(target, session.conversation([...session.history, ...exchange])));
    session.append(...exchange);
    session.stage = target === null ? undefined : new StageUsage(target);
    const { tokens, reused, restored, ms } = report.rebuild;
    this.logger.info({ session: session.id, from, to: target, cache: report.strategy, rebuiltTokens: tokens, reusedTokens: reused, restoredTokens: restored, rebuildMs: ms }, "weights switched");
    return report;
  }

  /**
   * Records the client's results of the model's calls to client-declared tools. `waitedMs` (the time the
   * client took) does not count against the active stage's time budget.
   */
  async answerClientCalls(owner: string, id: string, results: readonly { callId: string; content: string }[], waitedMs: number): Promise<void> {
    const session = this.get(owner, id);
    await session.lock.run(async () => {
      session.touch();
      const calls = results.map((r) => this.pendingCall(session, r.callId));
      const foreign = calls.filter((c) => !session.clientTools.includes(c.name));
      if (foreign.length) throw new UnknownCallError(`call(s) ${foreign.map((c) => c.id).join(", ")} are not calls of a client-declared tool`);
      session.append(...calls.map((call, i): HistoryMessage => ({ role: "tool", callId: call.id, name: call.name, content: results[i]!.content, isError: false, internal: false })));
      session.stage?.pause(waitedMs);
      for (const _ of calls) session.stage?.recordToolCall();
    });
  }

  /** Counts for the status page: sessions by state, the work queue. */
  overview(): { sessions: Session[]; queue: { pending: number; running: number; maxPending: number } } {
    return { sessions: [...this.sessions.values()], queue: this.queue.stats() };
  }

  /** Answers a pending model call with an error the model reads (a harness guard refusing it). */
  async rejectCall(owner: string, id: string, callId: string, message: string): Promise<void> {
    const session = this.get(owner, id);
    await session.lock.run(async () => {
      const call = this.pendingCall(session, callId);
      session.append(toolResult(call, message, true));
    });
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
    const session = this.get(owner, id);
    await session.lock.run(async () => {
      try {
        await session.engine.close();
      } finally {
        this.sessions.delete(id);
      }
    });
    this.logger.info({ session: id }, "session closed");
  }

  /** Closes every session of `owner` (its connection ended and nobody else can reach them). */
  async closeOwnedBy(owner: string): Promise<void> {
    await Promise.all(this.list(owner).map((s) => this.close(owner, s.id)));
  }

  async dispose(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.sessions.values()].map((s) => this.close(s.owner, s.id)));
  }

  /**
   * The paper's state rule: load only from the base, offload only the active adapter. An invalid action
   * changes nothing; when it answers a model call, the error is recorded as that call's result so the
   * model reads why. A valid one switches the weights with the exchange as the history's next messages.
   */
  private async weightAction(owner: string, id: string, action: typeof LOAD_LORA | typeof OFFLOAD_LORA, input: WeightActionInput): Promise<WeightActionOutcome> {
    const session = this.get(owner, id);
    return session.lock.run(async () => {
      session.touch();
      const call = input.callId ? this.pendingCall(session, input.callId) : undefined;
      const args = { ...(call?.arguments ?? {}), ...(input.adapter !== undefined ? { adapter: input.adapter } : {}), ...(input.handoff !== undefined ? { handoff: input.handoff } : {}) };
      const active = session.activeAdapter;
      if (!session.settings.weightActions) throw new LimitError(`this session runs on fixed weights (${active ?? "base"}); ${action} is not available in it`);
      const problem =
        callMismatch(action, call, input.adapter) ??
        stateRuleProblem({ action, active, adapter: args.adapter as string | undefined, call, pending: session.pendingCalls(), resident: this.runtime.library.aliases() });
      if (problem) {
        if (call) session.append(toolResult(call, problem, true));
        return { ok: false, error: problem, recordedForCall: call?.id ?? null };
      }
      // the state rule passed: a load names a resident adapter, an offload returns to the base
      const target = action === LOAD_LORA ? (args.adapter as string) : null;
      const exchange: HistoryMessage[] = [];
      const answered = call ?? { id: newId("call_", 9), name: action, arguments: action === LOAD_LORA ? { adapter: target } : input.handoff !== undefined ? { handoff: input.handoff } : {} };
      if (!call) exchange.push({ role: "assistant", content: "", adapter: active, author: input.author ?? "client", toolCalls: [answered] });
      const message = this.exchangeMessage(action, (target ?? active)!) + (input.reason ? ` [${input.reason}]` : "");
      exchange.push(toolResult(answered, message, false));
      let report: SwitchReport;
      try {
        report = await this.switchWith(session, target, exchange);
      } catch (err) {
        if (!(err instanceof EngineError)) throw err;
        const reason = `${action} failed, nothing changed: ${err.message}`;
        if (call) session.append(toolResult(call, reason, true));
        return { ok: false, error: reason, recordedForCall: call?.id ?? null };
      }
      return { ok: true, action, previous: active, active: target, callId: answered.id, message, switch: report };
    });
  }

  private pendingCall(session: Session, callId: string): ToolCallRecord {
    const call = session.pendingCalls().find((c) => c.id === callId);
    if (!call) throw new UnknownCallError(`call_id "${callId}" is not an unanswered call of the model's last turn; pending: ${session.pendingCalls().map((c) => `${c.id} (${c.name})`).join(", ") || "(none)"}`);
    return call;
  }

  private exchangeMessage(action: string, alias: string): string {
    const entry = this.runtime.library.get(alias)?.entry;
    return action === LOAD_LORA
      ? (entry?.activation ?? `Capability "${alias}" is active. Call offload_lora when this stage is done.`)
      : (entry?.release ?? `Capability "${alias}" released; the base model continues.`);
  }

  private async expireIdle(): Promise<void> {
    const cutoff = Date.now() - this.config.idleMinutes * 60_000;
    for (const s of [...this.sessions.values()]) {
      if (s.lastActiveAt < cutoff && s.lock.depth === 0) {
        this.logger.info({ session: s.id, owner: s.owner }, "session expired after idling");
        await this.close(s.owner, s.id).catch((err) => this.logger.error({ err }, "closing an idle session failed"));
      }
    }
  }
}

/** Runs a tool under its own time limit; an unexpected failure becomes an error outcome the model can read. */
async function runWithTimeout(tool: ExternalTool, args: Record<string, unknown>, outer: AbortSignal): Promise<ToolOutcome> {
  const signal = AbortSignal.any([outer, AbortSignal.timeout(tool.timeoutMs)]);
  try {
    return await tool.run(args, signal);
  } catch (err) {
    if (signal.aborted && !outer.aborted) return { ok: false, error: `${tool.name} timed out after ${tool.timeoutMs} ms` };
    return { ok: false, error: `${tool.name} failed: ${(err as Error).message}` };
  }
}

function toolResult(call: ToolCallRecord, content: string, isError: boolean): HistoryMessage {
  return { role: "tool", callId: call.id, name: call.name, content, isError, internal: true };
}
