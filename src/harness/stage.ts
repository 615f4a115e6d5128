import type { StageBudget } from "./budgets.js";
import type { RunContext } from "./RunContext.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../sessions/modelFunctions.js";

export type StageEnd = "exit_call" | "budget:turns" | "budget:tokens" | "budget:tool_calls" | "budget:seconds" | "no_tool" | "error";

export interface StageResult {
  end: StageEnd;
  /** The stage's last non-empty assistant text. */
  lastText: string;
  turns: number;
  tokens: number;
  toolCalls: number;
  handoff?: string;
}

/**
 * One stage under the active weights (an adapter, or the base as a fallback). It ends when the model emits
 * offload_lora (its exit call), a budget runs out, or `noToolTurns` turns pass without a tool call. When the
 * harness ends it, it records a synthetic offload saying why, so the next weights read what happened.
 */
export async function runStage(ctx: RunContext, stage: string, budget: StageBudget): Promise<StageResult> {
  const started = ctx.now();
  const result: StageResult = { end: "budget:turns", lastText: "", turns: 0, tokens: 0, toolCalls: 0 };
  let noTool = 0;
  ctx.startVisit(ctx.route());
  ctx.trace.event("stage_start", { stage, adapter: ctx.route(), budget });
  loop: for (;;) {
    const over = exhausted(result, budget, ctx.now() - started);
    if (over) {
      result.end = over;
      break;
    }
    const turn = await ctx.modelTurn(stage, budget.tokens - result.tokens);
    result.turns++;
    result.tokens += turn.generated;
    if (turn.text.trim()) result.lastText = turn.text;
    if (!turn.calls.length) {
      if (++noTool >= budget.noToolTurns) {
        result.end = "no_tool";
        break;
      }
      continue;
    }
    noTool = 0;
    for (const call of turn.calls) {
      if (call.name === OFFLOAD_LORA) {
        const handoff = typeof call.arguments.handoff === "string" ? call.arguments.handoff : undefined;
        const done = await ctx.weightAction(stage, "offload", "model", () => ctx.driver.offload({ callId: call.id }), { handoff });
        if (done.ok) {
          result.end = "exit_call";
          result.handoff = handoff;
          break loop;
        }
      } else if (call.name === LOAD_LORA) {
        await ctx.orchestrate(() => ctx.driver.reject(call.id, `load_lora refused: the harness runs this stage under ${ctx.route()}; finish it with offload_lora`));
      } else if (result.toolCalls >= budget.toolCalls) {
        await ctx.orchestrate(() => ctx.driver.reject(call.id, `${call.name} refused: this stage's budget of ${budget.toolCalls} tool calls is spent`));
        result.end = "budget:tool_calls";
        break loop;
      } else {
        result.toolCalls++;
        await ctx.tool(stage, call);
      }
    }
  }
  if (result.end !== "exit_call" && ctx.driver.active() !== null) {
    const handoff = result.lastText.slice(0, 2000) || undefined;
    await ctx.weightAction(stage, "offload", "harness", () => ctx.driver.offload({ handoff, reason: `stage ended by the harness: ${describeEnd(result.end, budget)}` }), { cause: result.end });
  }
  ctx.trace.event("stage_end", { stage, end: result.end, turns: result.turns, tokens: result.tokens, toolCalls: result.toolCalls, ms: Number((ctx.now() - started).toFixed(3)) });
  return result;
}

function exhausted(r: StageResult, b: StageBudget, elapsedMs: number): StageEnd | undefined {
  if (r.turns >= b.turns) return "budget:turns";
  if (r.tokens >= b.tokens) return "budget:tokens";
  if (elapsedMs >= b.seconds * 1000) return "budget:seconds";
  return undefined;
}

export function describeEnd(end: StageEnd, b: StageBudget): string {
  switch (end) {
    case "budget:turns": return `turn budget (${b.turns}) spent`;
    case "budget:tokens": return `token budget (${b.tokens}) spent`;
    case "budget:tool_calls": return `tool-call budget (${b.toolCalls}) spent`;
    case "budget:seconds": return `time budget (${b.seconds} s) spent`;
    case "no_tool": return `${b.noToolTurns} turns without a tool call`;
    case "error": return "the stage failed";
    case "exit_call": return "the adapter released itself";
  }
}
