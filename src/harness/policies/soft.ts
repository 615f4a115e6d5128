import type { SoftLimits, StageBudget } from "../../budgets/budgets.js";
import type { ModelCall } from "../driver.js";
import type { RunContext } from "../RunContext.js";
import { runStage } from "../stage.js";
import { LOAD_LORA } from "../../library/weightActions.js";
import type { PolicyResult } from "./hard.js";

/**
 * WeAct-soft: the base model chooses. It loads a capability with load_lora; the adapter works and hands
 * control back with offload_lora (or the harness ends its stage). Guards: revisits per adapter, total
 * switches, repetition (reloading the adapter just released with no new tool result in between), coverage
 * (the answer must come from the writer, the workflow's last stage, when the library has it: the base is told so,
 * once), and termination (turns, tokens, time), after which a final write stage is forced, or the base's text stands.
 * A write stage that releases by itself gives the base one closing turn, and the write stage's text is the answer.
 * The writer is named by the workflow, not by an alias, so that a library under other names keeps its guards.
 */
export async function runSoft(
  ctx: RunContext,
  limits: SoftLimits,
  budgetFor: (alias: string) => StageBudget,
  writer: string | undefined,
): Promise<PolicyResult> {
  const started = ctx.now();
  const visits = new Map<string, number>();
  const stages: string[] = [];
  let lastReleased: string | undefined;
  let toolResultsSinceRelease = 0;
  let toldCoverage = false;
  let baseText = "";
  let baseTurns = 0;
  const hasWrite = writer !== undefined && ctx.driver.adapters.includes(writer);
  // the base and every other stage keep room for a release and for the final write stage
  const reserve = ctx.contextReserve * (hasWrite ? 2 : 1);
  ctx.startVisit("base");

  const runAdapter = async (alias: string, call?: ModelCall) => {
    const stage = `${stages.length + 1}:${alias}`;
    const loaded = await ctx.weightAction(stage, "load", call ? "model" : "harness", () =>
      ctx.driver.load(
        alias,
        call
          ? { callId: call.id }
          : { reason: "the run reached its limits; the harness forces the final writing stage" },
      ),
    );
    if (!loaded.ok) return undefined;
    visits.set(alias, (visits.get(alias) ?? 0) + 1);
    stages.push(alias);
    const result = await runStage(ctx, stage, budgetFor(alias), alias === writer ? ctx.contextReserve : reserve);
    lastReleased = alias;
    toolResultsSinceRelease = 0;
    ctx.startVisit("base");
    return result;
  };

  for (;;) {
    const elapsed = ctx.now() - started;
    const budgetLimit =
      baseTurns >= limits.turns
        ? "turns"
        : ctx.generatedTokens >= limits.tokens
          ? "tokens"
          : elapsed >= limits.seconds * 1000
            ? "seconds"
            : undefined;
    const room = budgetLimit ? undefined : await ctx.roomForTurn("base", reserve);
    const limit = budgetLimit ?? (room === undefined ? "context" : undefined);
    if (limit) {
      ctx.trace.event("guard", {
        rule: "termination",
        limit,
        detail:
          limit === "context"
            ? "the context window has no room for another base turn"
            : `the run's ${limit} limit was reached`,
      });
      if (hasWrite && ctx.driver.active() === null) {
        const forced = await runAdapter(writer);
        if (forced)
          return { text: forced.lastText || baseText, stages, budgetEnded: limit !== "context", stopped: forced.stuck };
      }
      return { text: baseText, stages: [...stages, "base"], budgetEnded: limit !== "context" };
    }
    const turn = await ctx.modelTurn("base", Math.min(limits.tokens - ctx.generatedTokens, room!));
    baseTurns++;
    if (turn.text.trim()) baseText = turn.text;
    if (!turn.calls.length) {
      if (hasWrite && !visits.has(writer) && !toldCoverage) {
        toldCoverage = true;
        ctx.trace.event("guard", { rule: "coverage", detail: "the base tried to answer without the write capability" });
        await ctx.orchestrate(() =>
          ctx.driver.note(
            `Before answering, load the "${writer}" capability with load_lora: the final answer must be written by it.`,
          ),
        );
        continue;
      }
      return { text: baseText, stages: [...stages, "base"] };
    }
    for (const call of turn.calls) {
      if (call.name !== LOAD_LORA) {
        const r = await ctx.tool("base", call);
        if (r.ok) toolResultsSinceRelease++;
        continue;
      }
      const alias = String(call.arguments.adapter ?? "");
      const refusal = guardLoad(alias, {
        visits,
        limits,
        switches: ctx.switches,
        lastReleased,
        toolResultsSinceRelease,
      });
      if (refusal) {
        ctx.trace.event("guard", { rule: refusal.rule, adapter: alias, detail: refusal.message });
        await ctx.orchestrate(() => ctx.driver.reject(call.id, refusal.message));
        continue;
      }
      const result = await runAdapter(alias, call);
      if (result?.stuck) return { text: result.lastText || baseText, stages, stopped: true };
      if (result && alias === writer) {
        // a write stage that released by itself hands the turn back: the base's next turn is the run's last
        if (result.end === "exit_call") await closingTurn(ctx, reserve);
        return { text: result.lastText, stages, budgetEnded: result.end.startsWith("budget:") };
      }
    }
  }
}

/**
 * The base's turn after the write stage released with the answer: a model that learned the loop ends its turn there
 * (as a client driving it by hand sees it do). Any call it makes instead is refused, since the answer is written, and
 * the run ends all the same; the trace says which it was.
 */
async function closingTurn(ctx: RunContext, reserve: number): Promise<void> {
  const room = await ctx.roomForTurn("base", reserve);
  if (room === undefined) return;
  const turn = await ctx.modelTurn("base", room);
  for (const call of turn.calls) {
    const message = `${call.name} refused: the write stage gave the answer and the run is over; end your turn`;
    ctx.trace.event("guard", { rule: "termination", detail: message });
    await ctx.orchestrate(() => ctx.driver.reject(call.id, message));
  }
}

function guardLoad(
  alias: string,
  s: {
    visits: Map<string, number>;
    limits: SoftLimits;
    switches: number;
    lastReleased?: string;
    toolResultsSinceRelease: number;
  },
): { rule: string; message: string } | undefined {
  const visits = s.visits.get(alias) ?? 0;
  if (visits > s.limits.revisitsPerAdapter)
    return {
      rule: "revisits",
      message: `load_lora refused: "${alias}" was already used ${visits} times (limit: ${s.limits.revisitsPerAdapter} revisits)`,
    };
  if (s.switches >= s.limits.switches)
    return {
      rule: "switches",
      message: `load_lora refused: the run's ${s.limits.switches} weight switches are spent; answer with what you have`,
    };
  if (alias === s.lastReleased && s.toolResultsSinceRelease === 0) {
    return {
      rule: "repetition",
      message: `load_lora refused: "${alias}" was just released and no new tool result arrived since; do something else first`,
    };
  }
  return undefined;
}
