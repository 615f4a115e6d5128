import { describeEnd, stageSpent, type StageBudget, type StageEnd } from "../budgets/budgets.js";
import type { RunContext } from "./RunContext.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../library/weightActions.js";

export type { StageEnd };

export interface StageResult {
  end: StageEnd;
  /** The stage's last non-empty assistant text. */
  lastText: string;
  turns: number;
  tokens: number;
  toolCalls: number;
  handoff?: string;
  /** The stage ended with its adapter still active: its release failed (the trace says why). */
  stuck?: boolean;
}

/**
 * One stage under the active weights (an adapter, or the base as a fallback). It ends when the model emits
 * offload_lora (its exit call), a budget runs out (`budgets.stageSpent`, the rule the server applies to
 * client-driven sessions too), `noToolTurns` turns pass without a tool call, or the context window has no
 * room for another turn beyond `reserve` (what later exchanges and stages need). When the harness ends it,
 * it records a synthetic offload saying why, so the next weights read what happened.
 */
export async function runStage(
  ctx: RunContext,
  stage: string,
  budget: StageBudget,
  reserve = ctx.contextReserve,
): Promise<StageResult> {
  const started = ctx.now();
  const result: StageResult = { end: "budget:turns", lastText: "", turns: 0, tokens: 0, toolCalls: 0 };
  let noTool = 0;
  ctx.startVisit(ctx.route());
  ctx.trace.event("stage_start", { stage, adapter: ctx.route(), budget, reserve });
  loop: for (;;) {
    const over = stageSpent(
      {
        turns: result.turns,
        tokens: result.tokens,
        toolCalls: result.toolCalls,
        turnsWithoutTool: noTool,
        elapsedMs: ctx.now() - started,
      },
      budget,
    );
    if (over) {
      result.end = over;
      break;
    }
    const room = await ctx.roomForTurn(stage, reserve);
    if (room === undefined) {
      result.end = "context";
      break;
    }
    const turn = await ctx.modelTurn(stage, Math.min(budget.tokens - result.tokens, room));
    result.turns++;
    result.tokens += turn.generated;
    if (turn.text.trim()) result.lastText = turn.text;
    if (!turn.calls.length) {
      noTool++;
      continue;
    }
    noTool = 0;
    for (const call of turn.calls) {
      if (call.name === OFFLOAD_LORA) {
        const handoff = typeof call.arguments.handoff === "string" ? call.arguments.handoff : undefined;
        const done = await ctx.weightAction(stage, "offload", "model", () => ctx.driver.offload({ callId: call.id }), {
          handoff,
        });
        if (done.ok) {
          result.end = "exit_call";
          result.handoff = handoff;
          break loop;
        }
      } else if (call.name === LOAD_LORA) {
        await ctx.orchestrate(() =>
          ctx.driver.reject(
            call.id,
            `load_lora refused: the harness runs this stage under ${ctx.route()}; finish it with offload_lora`,
          ),
        );
      } else if (result.toolCalls >= budget.toolCalls) {
        await ctx.orchestrate(() =>
          ctx.driver.reject(
            call.id,
            `${call.name} refused: this stage's budget of ${budget.toolCalls} tool calls is spent`,
          ),
        );
        result.end = "budget:tool_calls";
        break loop;
      } else {
        result.toolCalls++;
        await ctx.tool(stage, call);
      }
    }
  }
  if (result.end !== "exit_call" && ctx.driver.active() !== null) {
    const released = await ctx.release(
      stage,
      `stage ended by the harness: ${describeEnd(result.end, budget)}`,
      result.lastText,
      reserve,
      { cause: result.end },
    );
    result.stuck = !released;
  }
  ctx.trace.event("stage_end", {
    stage,
    end: result.end,
    turns: result.turns,
    tokens: result.tokens,
    toolCalls: result.toolCalls,
    active: ctx.driver.active(),
    ms: Number((ctx.now() - started).toFixed(3)),
  });
  return result;
}
