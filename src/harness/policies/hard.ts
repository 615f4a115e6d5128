import type { StageBudget } from "../budgets.js";
import type { RunContext } from "../RunContext.js";
import { runStage, type StageResult } from "../stage.js";

export interface PolicyResult {
  /** The text the answer is extracted from. */
  text: string;
  /** The adapter (or "base") of each stage, in order. */
  stages: string[];
}

/**
 * WeAct-hard: the harness prescribes the workflow (default plan -> search -> write). Each stage loads its
 * adapter (a harness-authored exchange), lets it act until it ends, and releases it. A stage whose adapter
 * is missing, or that fails, runs on the base model instead, and the trace says so.
 */
export async function runHard(ctx: RunContext, workflow: readonly string[], budgetFor: (alias: string) => StageBudget): Promise<PolicyResult> {
  let last: StageResult | undefined;
  const stages: string[] = [];
  for (const [i, alias] of workflow.entries()) {
    const final = i === workflow.length - 1;
    const stage = `${i + 1}:${alias}`;
    let onAdapter = ctx.driver.adapters.includes(alias);
    if (onAdapter) {
      const loaded = await ctx.weightAction(stage, "load", "harness", () => ctx.driver.load(alias, { reason: `stage ${i + 1} of the prescribed workflow ${workflow.join(" -> ")}` }));
      onAdapter = loaded.ok;
      if (!loaded.ok) ctx.trace.event("fallback", { stage, adapter: alias, reason: `load failed: ${loaded.error}` });
    } else {
      ctx.trace.event("fallback", { stage, adapter: alias, reason: "the library has no such adapter; the base model runs this stage" });
    }
    try {
      last = await runStage(ctx, stage, budgetFor(alias));
    } catch (err) {
      if ((err as Error).name === "RunCancelledError" || !onAdapter) throw err;
      // the stage runs again on the base model, which reads why in the release exchange
      ctx.trace.event("fallback", { stage, adapter: alias, reason: `stage failed: ${(err as Error).message}` });
      if (ctx.driver.active() !== null) await ctx.weightAction(stage, "offload", "harness", () => ctx.driver.offload({ reason: `stage failed: ${(err as Error).message}; the base model continues` }));
      onAdapter = false;
      last = await runStage(ctx, stage, budgetFor(alias));
    }
    stages.push(onAdapter ? alias : "base");
    if (final) return { text: last.lastText, stages };
  }
  return { text: last?.lastText ?? "", stages };
}
