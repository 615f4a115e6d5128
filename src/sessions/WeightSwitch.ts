import { EngineError, type SwitchReport } from "../engine/index.js";
import { layered, type StageBudget } from "../budgets/budgets.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { Logger } from "../log.js";
import { LimitError } from "./errors.js";
import { internalResult, newCallId } from "./exchanges.js";
import type { Author, HistoryMessage, ToolCallRecord } from "./history.js";
import { exchangeMessage, LOAD_LORA, OFFLOAD_LORA, withReason } from "../library/weightActions.js";
import type { Session } from "./Session.js";
import type { SessionRegistry } from "./SessionRegistry.js";
import { StageUsage } from "./StageUsage.js";
import { callMismatch, stateRuleProblem } from "./stateRule.js";
import type { WorkQueue } from "./WorkQueue.js";

export interface WeightActionInput {
  adapter?: string;
  callId?: string;
  handoff?: string;
  author?: Exclude<Author, "model">;
  /** Why the harness performs this action itself; appended to the recorded result so the next weights read it. */
  reason?: string;
}

export type WeightActionOutcome =
  | {
      ok: true;
      action: typeof LOAD_LORA | typeof OFFLOAD_LORA;
      previous: string | null;
      active: string | null;
      callId: string;
      message: string;
      switch: SwitchReport;
    }
  | { ok: false; error: string; recordedForCall: string | null };

/** A release the server made itself because the active stage spent its budget. */
export interface BudgetRelease {
  adapter: string;
  reason: string;
  switch: SwitchReport;
}

/**
 * The weight switch of sessions: load and offload under the state rule, and the server-side release when a stage's
 * budget is spent. Every switch, whoever asked for it (client, harness, budget), goes through `switchSession`, the
 * one place that hands it to the engine (`EngineSession.switchWeights`).
 */
export class WeightSwitch {
  constructor(
    private readonly registry: SessionRegistry,
    private readonly library: AdapterLibrary,
    private readonly queue: WorkQueue,
    /** The stage budget of an adapter (manifest entry > config > defaults), enforced in client-driven generate. */
    private readonly stageBudget: (alias: string) => StageBudget,
    private readonly logger: Logger,
  ) {}

  /**
   * The paper's state rule: load only from the base, offload only the active adapter. An invalid action
   * changes nothing; when it answers a model call, the error is recorded as that call's result so the
   * model reads why. A valid one switches the weights with the exchange as the history's next messages.
   * `owner`'s session `id` (someone else's is reported exactly like a missing one).
   */
  async switch(
    owner: string,
    id: string,
    action: typeof LOAD_LORA | typeof OFFLOAD_LORA,
    input: WeightActionInput,
  ): Promise<WeightActionOutcome> {
    const session = this.registry.get(owner, id);
    const release = await session.lock.acquire();
    try {
      session.touch();
      const call = input.callId ? session.pendingCall(input.callId) : undefined;
      const args = {
        ...(call?.arguments ?? {}),
        ...(input.adapter !== undefined ? { adapter: input.adapter } : {}),
        ...(input.handoff !== undefined ? { handoff: input.handoff } : {}),
      };
      const active = session.activeAdapter;
      if (!session.settings.weightActions)
        throw new LimitError(
          `this session runs on fixed weights (${active ?? "base"}); ${action} is not available in it`,
        );
      const problem =
        callMismatch(action, call, input.adapter) ??
        stateRuleProblem({
          action,
          active,
          adapter: args.adapter as string | undefined,
          call,
          pending: session.pendingCalls(),
          resident: this.library.aliases(),
        });
      if (problem) {
        if (call) session.append(internalResult(call, problem, true));
        return { ok: false, error: problem, recordedForCall: call?.id ?? null };
      }
      // the state rule passed: a load names a resident adapter, an offload returns to the base
      const target = action === LOAD_LORA ? (args.adapter as string) : null;
      const exchange: HistoryMessage[] = [];
      const answered = call ?? {
        id: newCallId(),
        name: action,
        arguments:
          action === LOAD_LORA ? { adapter: target } : input.handoff !== undefined ? { handoff: input.handoff } : {},
      };
      if (!call)
        exchange.push({
          role: "assistant",
          content: "",
          adapter: active,
          author: input.author ?? "client",
          toolCalls: [answered],
        });
      const alias = (target ?? active)!;
      const message = withReason(exchangeMessage(this.library.get(alias)?.entry, action, alias), input.reason);
      exchange.push(internalResult(answered, message, false));
      let report: SwitchReport;
      try {
        report = await this.switchSession(session, target, exchange);
      } catch (err) {
        if (!(err instanceof EngineError)) throw err;
        const reason = `${action} failed, nothing changed: ${err.message}`;
        if (call) session.append(internalResult(call, reason, true));
        return { ok: false, error: reason, recordedForCall: call?.id ?? null };
      }
      return { ok: true, action, previous: active, active: target, callId: answered.id, message, switch: report };
    } finally {
      release();
    }
  }

  /**
   * Client-driven mode follows the same stage budgets as the harness: when the active adapter's stage has
   * spent one, the server releases it itself (an exchange attributed to the harness, saying why) before the
   * next turn. Called under the session lock.
   */
  async enforceStageBudget(session: Session): Promise<BudgetRelease | undefined> {
    const stage = session.stage;
    if (!stage || !session.settings.weightActions) return undefined;
    const reason = stage.exhausted(layered(this.stageBudget(stage.adapter), session.settings.stageBudget));
    if (!reason) return undefined;
    const answered: ToolCallRecord = { id: newCallId(), name: OFFLOAD_LORA, arguments: {} };
    const message = `${exchangeMessage(this.library.get(stage.adapter)?.entry, OFFLOAD_LORA, stage.adapter)} [stage ended by the server: ${reason}]`;
    const exchange: HistoryMessage[] = [
      { role: "assistant", content: "", adapter: stage.adapter, author: "harness", toolCalls: [answered] },
      internalResult(answered, message, false),
    ];
    const report = await this.switchSession(session, null, exchange);
    this.logger.info(
      { session: session.id, adapter: stage.adapter, reason },
      "stage budget spent: adapter released by the server",
    );
    return { adapter: stage.adapter, reason, switch: report };
  }

  /**
   * Switches the session's weights with `exchange` as the history's next messages, then commits them: only
   * a switch that succeeded leaves a trace in the history. Called under the session lock.
   */
  private async switchSession(
    session: Session,
    target: string | null,
    exchange: HistoryMessage[],
  ): Promise<SwitchReport> {
    const from = session.activeAdapter;
    const turn = await this.queue.admit(session.owner);
    let report: SwitchReport;
    try {
      const done = await session.engine.switchWeights(target, session.conversation([...session.history, ...exchange]));
      report = { ...done, queueMs: turn.waitedMs + done.queueMs };
    } finally {
      turn.done();
    }
    session.append(...exchange);
    session.stage = target === null ? undefined : new StageUsage(target);
    session.anticipateNext(this.library.aliases());
    const { tokens, reused, restored, ms } = report.rebuild;
    this.logger.info(
      {
        session: session.id,
        from,
        to: target,
        cache: report.strategy,
        rebuiltTokens: tokens,
        reusedTokens: reused,
        restoredTokens: restored,
        rebuildMs: ms,
      },
      "weights switched",
    );
    return report;
  }
}
