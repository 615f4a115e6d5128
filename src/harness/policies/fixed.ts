import type { SoftLimits } from "../../budgets/budgets.js";
import type { RunContext } from "../RunContext.js";
import type { PolicyResult } from "./hard.js";

/**
 * The comparison modes (base, single:<alias>, static): the weights never change. The model acts with the
 * external tools until it answers without a call, or the run's limits end it.
 */
export async function runFixed(ctx: RunContext, limits: SoftLimits, label: string): Promise<PolicyResult> {
  const started = ctx.now();
  let text = "";
  ctx.startVisit(ctx.route());
  for (
    let turns = 0;
    turns < limits.turns && ctx.generatedTokens < limits.tokens && ctx.now() - started < limits.seconds * 1000;
    turns++
  ) {
    // fixed weights: no release exchange to keep room for
    const room = await ctx.roomForTurn(label, 0);
    if (room === undefined) return { text, stages: [label] };
    const turn = await ctx.modelTurn(label, Math.min(limits.tokens - ctx.generatedTokens, room));
    if (turn.text.trim()) text = turn.text;
    if (!turn.calls.length) return { text, stages: [label] };
    for (const call of turn.calls) await ctx.tool(label, call);
  }
  ctx.trace.event("guard", { rule: "termination", detail: "the run's limits were reached" });
  return { text, stages: [label], budgetEnded: true };
}
