import type { StageBudget } from "../../budgets/budgets.js";
import type { RunContext } from "../RunContext.js";
import { runStage, type StageResult } from "../stage.js";

export interface PolicyResult {
  /** The text the answer is extracted from. */
  text: string;
  /** The adapter (or "base") of each stage, in order. */
  stages: string[];
  /** The run's last stage (or the run itself) ended on a budget, not on an answer. */
  budgetEnded?: boolean;
  /** The run stopped early because the session could not return to the base (the trace says why). */
  stopped?: boolean;
}

/**
 * WeAct-hard: the harness prescribes the workflow (default plan -> search -> write). Each stage loads its
 * adapter (a harness-authored exchange), lets it act until it ends, and releases it. A stage whose adapter
 * is missing, whose load failed, or that failed, runs on the base model instead, and the trace says so.
 * Every stage keeps room in the window for its own release and for each stage after it, so the final
 * `write` stage always gets to run.
 */
export async function runHard(
  ctx: RunContext,
  workflow: readonly string[],
  budgetFor: (alias: string) => StageBudget,
): Promise<PolicyResult> {
  let last: StageResult | undefined;
  const stages: string[] = [];
  for (const [i, alias] of workflow.entries()) {
    const final = i === workflow.length - 1;
    const stage = `${i + 1}:${alias}`;
    // its own release, and a load and a release for every later stage
    const reserve = ctx.contextReserve * (1 + 2 * (workflow.length - 1 - i));
    // an earlier release failed: nothing may run before the session is back on the base
    if (
      ctx.driver.active() !== null &&
      !(await ctx.release(
        stage,
        `the previous stage's release failed; the harness releases ${ctx.route()} before stage ${i + 1}`,
        "",
        reserve,
      ))
    ) {
      ctx.trace.event("fallback", {
        stage,
        adapter: alias,
        reason: `the session could not return to the base model; ${ctx.route()} stays active and the run stops here`,
      });
      return { text: last?.lastText ?? "", stages, stopped: true };
    }
    let onAdapter = ctx.driver.adapters.includes(alias);
    const { size, used } = await ctx.driver.room();
    if (onAdapter && size - used < reserve + ctx.contextReserve) {
      onAdapter = false;
      ctx.trace.event("fallback", {
        stage,
        adapter: alias,
        runsOn: ctx.route(),
        reason: "the context window has no room for this stage's load and release exchanges; the base model runs it",
      });
    } else if (onAdapter) {
      const loaded = await ctx.weightAction(stage, "load", "harness", () =>
        ctx.driver.load(alias, { reason: `stage ${i + 1} of the prescribed workflow ${workflow.join(" -> ")}` }),
      );
      onAdapter = loaded.ok;
      // the release returns to the base, and the next stage's adapter follows: both caught up while this stage's tools
      // run
      if (onAdapter) ctx.driver.plan([null, ...workflow.slice(i + 1, i + 2)]);
      if (!loaded.ok)
        ctx.trace.event("fallback", {
          stage,
          adapter: alias,
          runsOn: ctx.route(),
          reason: `load failed: ${loaded.error}`,
        });
    } else if (!ctx.driver.adapters.includes(alias)) {
      ctx.trace.event("fallback", {
        stage,
        adapter: alias,
        runsOn: ctx.route(),
        reason: "the library has no such adapter; the base model runs this stage",
      });
    }
    try {
      last = await runStage(ctx, stage, budgetFor(alias), reserve);
    } catch (err) {
      if ((err as Error).name === "RunCancelledError" || !onAdapter) throw err;
      // the stage runs again on the base model, which reads why in the release exchange
      const reason = `stage failed: ${(err as Error).message}`;
      if (
        ctx.driver.active() !== null &&
        !(await ctx.release(stage, `${reason}; the base model continues`, "", reserve))
      ) {
        ctx.trace.event("fallback", {
          stage,
          adapter: alias,
          reason: `${reason}; the session could not return to the base model and the run stops here`,
        });
        return { text: last?.lastText ?? "", stages, stopped: true };
      }
      ctx.trace.event("fallback", { stage, adapter: alias, runsOn: ctx.route(), reason });
      onAdapter = false;
      last = await runStage(ctx, stage, budgetFor(alias), reserve);
    }
    stages.push(onAdapter ? alias : "base");
    if (final) return { text: last.lastText, stages, budgetEnded: last.end.startsWith("budget:") };
  }
  return { text: last?.lastText ?? "", stages };
}
