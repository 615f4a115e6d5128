import type { ChatTurn, Conversation, EngineSession, FunctionSpec, HistorySoFar } from "../engine/index.js";
import { Mutex } from "../mutex.js";
import type { StageBudget } from "../budgets/budgets.js";
import { UnknownCallError } from "./errors.js";
import {
  elidedResults,
  pendingCalls,
  toConversation,
  type HistoryMessage,
  type ToolCallRecord,
  type ToolMessage,
} from "./history.js";
import { callableFunctions } from "./modelFunctions.js";
import { nextWeights } from "./stateRule.js";
import type { StageUsage } from "./StageUsage.js";

export interface SessionSettings {
  keepToolResults: number;
  /** false for fixed-weight sessions (comparison modes): no load_lora/offload_lora. */
  weightActions: boolean;
  /**
   * A run's own stage budgets (run_task's `budgets`): above the manifest and config ones in the server-side release.
   */
  stageBudget?: Partial<StageBudget>;
}

/**
 * One agent trajectory: the shared history every adapter reads, and the engine session (KV cache and
 * active adapter) it runs on. Operations on one session run one at a time, in order.
 */
export class Session {
  readonly lock = new Mutex();
  readonly createdAt = Date.now();
  lastActiveAt = Date.now();
  /** What the active adapter's stage has used so far (client-driven budgets); none on the base. */
  stage: StageUsage | undefined;
  /** The weights the harness knows come next, in order (null: the base); without it the state rule says what may. */
  private planned: readonly (string | null)[] | undefined;
  /** The adapters this trajectory has had active (told to the engine's guesses: see `nextWeights`). */
  private readonly used = new Set<string>();
  private messages: HistoryMessage[];

  constructor(
    readonly id: string,
    readonly owner: string,
    readonly task: string,
    readonly engine: EngineSession,
    /** Every function the model reads (weight actions + this session's external tools). */
    readonly functions: Readonly<Record<string, FunctionSpec>>,
    readonly externalTools: readonly string[],
    readonly settings: SessionSettings,
    system: string,
    earlier: { before?: HistoryMessage[]; after?: HistoryMessage[]; clientTools?: readonly string[] } = {},
  ) {
    this.clientTools = earlier.clientTools ?? [];
    this.messages = [
      { role: "system", content: system },
      ...(earlier.before ?? []),
      { role: "user", content: task },
      ...(earlier.after ?? []),
    ];
  }

  /** Functions the client executes itself (declared in its request); callable beside the server's tools. */
  readonly clientTools: readonly string[];

  get history(): readonly HistoryMessage[] {
    return this.messages;
  }

  get activeAdapter(): string | null {
    return this.engine.activeAdapter;
  }

  pendingCalls() {
    return pendingCalls(this.messages);
  }

  /** An unanswered call of the model's last turn, by id; anything else is an error naming the pending ones. */
  pendingCall(callId: string): ToolCallRecord {
    const pending = this.pendingCalls();
    const call = pending.find((c) => c.id === callId);
    if (!call)
      throw new UnknownCallError(
        `call_id "${callId}" is not an unanswered call of the model's last turn; pending: ${pending.map((c) => `${c.id} (${c.name})`).join(", ") || "(none)"}`,
      );
    return call;
  }

  callable(): string[] {
    const tools = [...this.externalTools, ...this.clientTools];
    return this.settings.weightActions ? callableFunctions(this.activeAdapter, tools) : tools;
  }

  conversation(history: readonly HistoryMessage[] = this.messages): Conversation {
    return toConversation(history, this.functions, this.settings.keepToolResults);
  }

  /** The oldest external tool result the model still reads in full, if any. */
  oldestVerbatimResult(): ToolMessage | undefined {
    const elided = elidedResults(this.messages, this.settings.keepToolResults);
    return this.messages.find((m): m is ToolMessage => m.role === "tool" && !m.internal && !elided.has(m));
  }

  /** From now on the model reads `result` as the keep_tool_result marker (the history keeps it in full). */
  elide(result: ToolMessage): void {
    this.messages = this.messages.map((m) => (m === result ? { ...result, elided: true } : m));
  }

  /** Commits messages once the work they describe has succeeded. */
  append(...messages: HistoryMessage[]): void {
    this.messages = [...this.messages, ...messages];
  }

  touch(): void {
    this.lastActiveAt = Date.now();
  }

  /** The harness's plan of the weights to come (hard mode knows its next stage); replaces the state rule's guess. */
  plan(upcoming: readonly (string | null)[]): void {
    this.planned = upcoming;
  }

  /**
   * Tells the engine which weights this trajectory needs next (`nextWeights`), and the history so far while the
   * model's calls run, so it can catch their caches up meanwhile. Fixed weights need nothing.
   */
  anticipateNext(resident: readonly string[]): void {
    if (!this.settings.weightActions) return;
    if (this.activeAdapter !== null) this.used.add(this.activeAdapter);
    this.engine.anticipate(
      nextWeights(this.activeAdapter, resident, this.planned, this.used).map((a) => (a === null ? [] : [a])),
      this.historySoFar(),
    );
  }

  /**
   * The history while the model's last turn has calls without results: the turn with its answered calls, and the rest
   * awaited.
   */
  private historySoFar(): HistorySoFar | undefined {
    const conversation = this.conversation();
    const last = conversation.turns.at(-1);
    if (last?.role !== "assistant") return undefined;
    const calls = last.calls ?? [];
    // toConversation leaves a pending call's result out
    const first = calls.findIndex((c) => typeof c.result !== "string");
    if (first < 0) return undefined;
    const turn: ChatTurn = { ...last, calls: calls.slice(0, first) };
    return {
      conversation: { ...conversation, turns: [...conversation.turns.slice(0, -1), turn] },
      awaiting: calls
        .slice(first)
        .map(({ name, arguments: args, raw }) => ({ name, arguments: args, ...(raw !== undefined ? { raw } : {}) })),
    };
  }
}
