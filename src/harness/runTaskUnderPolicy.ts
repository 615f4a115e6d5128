import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Config } from "../config/configSchema.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { FunctionSpec } from "../engine/index.js";
import type { HistoryMessage } from "../sessions/history.js";
import type { SessionService } from "../sessions/SessionService.js";
import { historyView } from "../sessions/view.js";
import { OFFLOAD_LORA } from "../library/weightActions.js";
import type { Toolbox } from "../externalTools/Toolbox.js";
import { cited, extractAnswer, grounded, judge } from "./answer.js";
import type { Degeneration } from "./degenerate.js";
import { DEFAULT_SOFT_LIMITS, layered, type SoftLimits, type StageBudget } from "../budgets/budgets.js";
import { SessionDriver, type ModelCall, type TrajectoryDriver } from "./driver.js";
import { runFixed } from "./policies/fixed.js";
import { runHard, type PolicyResult } from "./policies/hard.js";
import { runSoft } from "./policies/soft.js";
import { RunContext, type Progress } from "./RunContext.js";
import type { RecentRuns } from "./trace/RecentRuns.js";
import { Trace, type TimeBreakdown, type TraceEvent } from "./trace/Trace.js";
import { TraceStore } from "./trace/TraceStore.js";
import { checkRunInput, fixedAdapters } from "./runInput.js";
import { RunTaskInputSchema, type Finish, type Owner, type Policy, type RunTaskInput } from "./types.js";

export interface HarnessDeps {
  sessions: SessionService;
  toolbox: Toolbox;
  library: AdapterLibrary;
  config: Config["harness"];
  /** An adapter's stage budget from its manifest entry, the config and the defaults (run arguments go on top). */
  stageBudget: (alias: string) => StageBudget;
  traceDir: string;
  /** Traces of the runs still writing theirs: pruning leaves them alone. */
  liveTraces: Set<string>;
  /** Follows every run for the status page. */
  recent?: RecentRuns;
}

/** A result the client sends back for a model call of one of its own tools. */
export interface ClientResult {
  callId: string;
  content: string;
}

export interface RunOptions {
  signal?: AbortSignal;
  onProgress?: (p: Progress) => void;
  expected?: string | string[];
  /** A conversation that came before the task: the session's system prompt, messages before and after the task. */
  conversation?: { system?: string; before?: HistoryMessage[]; after?: HistoryMessage[] };
  /**
   * Tools the client executes itself: the model may call them beside the server's tools. When it does, the run
   * waits on `awaitClient` with every such call of that turn; the wait does not count against time budgets.
   */
  clientTools?: Readonly<Record<string, FunctionSpec>>;
  awaitClient?: (calls: ModelCall[], signal: AbortSignal) => Promise<ClientResult[]>;
  temperature?: number;
  stop?: readonly string[];
  /** Each model turn's text as it is decoded, with its stage and weights. */
  onText?: (chunk: string, stage: string, route: string) => void;
  /** Consulted before each model turn: a value steers it into a call (a client's forced `tool_choice`). */
  forceCall?: () => { name?: string } | undefined;
  /** Every trace event as it is recorded. */
  onEvent?: (e: TraceEvent) => void;
  /** The run's session exists: its trace and session ids. */
  onStart?: (ids: { traceId: string; sessionId: string }) => void;
  /** Who writes the model's turns, over the session's driver (the training oracle); unset, the model does. */
  teacher?: (session: SessionDriver) => TrajectoryDriver;
}
export interface TaskResult {
  traceId: string;
  traceFile: string;
  policy: Policy;
  /** How the run ended (`FINISHES`): with `budget` and `context` the answer is the best the run had. */
  finish: Finish;
  /** Empty when the run's output degenerated: its last text is in `text`, not presented as an answer. */
  answer: string;
  /** The answer was marked ("Answer: ..." or \boxed{...}). */
  marked: boolean;
  /** The final text the answer is taken from. */
  text: string;
  /** The run's first degenerate model turn and how many turns were (then `answer` is empty). */
  degenerate?: Degeneration & { turns: number };
  /**
   * A marked answer's words all occur in the task or a tool result the run read (true), or one occurs in none
   * (false: a value nothing the run read states). Unset without a marked answer.
   */
  grounded?: boolean;
  /** The text quotes its evidence ("Evidence: ..." lines) word for word from what the run read or was handed off. */
  cited?: boolean;
  stages: string[];
  switches: number;
  /** Of those, loads the model opened with its own load_lora call. */
  modelLoads: number;
  rebuiltTokens: number;
  /** Tokens the switches did not re-evaluate: their KV was kept from earlier work under the same weights. */
  reusedTokens: number;
  generatedTokens: number;
  time: TimeBreakdown;
  /** Share of the expected stages matched in order, when the task carries expected stages. */
  selectionAccuracy?: number;
  correct?: { exact: boolean; contains: boolean };
}

/**
 * Runs one task end to end under a policy on a fresh session: the same operations an MCP client uses,
 * driven by the harness, timed into a trace that is written as it goes.
 */
export async function runTask(
  deps: HarnessDeps,
  owner: Owner,
  raw: RunTaskInput,
  opts: RunOptions = {},
): Promise<TaskResult> {
  const input = RunTaskInputSchema.parse(raw);
  checkRunInput(input, deps.library, deps.config.workflow);
  const traceId = `t_${randomBytes(12).toString("base64url")}`;
  const traceFile = join(deps.traceDir, `${traceId}.jsonl`);
  const trace = new Trace(traceId, traceFile);
  const policy = input.policy;
  const fixed = fixedAdapters(policy, deps.library);
  const workflow = input.workflow ?? deps.config.workflow;
  // a hard run's model reads only the capabilities its workflow loads (in library order, as the prompt lists them):
  // adding one to the library leaves it unchanged
  const capabilities =
    policy === "hard"
      ? deps.library
          .capabilities()
          .map((a) => a.entry.alias)
          .filter((a) => workflow.includes(a))
      : undefined;
  const { value: session } = await trace.measure("orchestration", () =>
    deps.sessions.create(owner, {
      task: input.task,
      fixedAdapters: fixed,
      ...(capabilities ? { capabilities } : {}),
      clientTools: opts.clientTools,
      system: opts.conversation?.system,
      history: opts.conversation,
      stageBudget: input.budgets,
    }),
  );
  // only a run that got a session is a run: a refused request leaves no trace file and no row on the status page
  if (deps.recent) trace.listeners.push(deps.recent.follow(traceId, owner, input.task, policy));
  if (opts.onEvent) trace.listeners.push(opts.onEvent);
  trace.event("run_start", {
    owner,
    task: input.task,
    policy,
    workflow,
    seed: input.seed,
    fixedAdapters: fixed,
    ...(opts.teacher ? { teacher: true } : {}),
  });
  deps.liveTraces.add(traceId);
  void new TraceStore(deps.traceDir)
    .prune(owner, deps.liveTraces, {
      maxFiles: deps.config.maxTraceFiles,
      maxBytesPerOwner: Math.round(deps.config.maxTraceMiBPerClient * 1024 * 1024),
    })
    .catch(() => undefined);
  opts.onStart?.({ traceId, sessionId: session.id });
  const clientTools = new Set(Object.keys(opts.clientTools ?? {}));
  const sessionDriver = new SessionDriver(
    deps.sessions,
    owner,
    session.id,
    deps.library.aliases(),
    (call: ModelCall, signal: AbortSignal) =>
      clientTools.has(call.name)
        ? askClient(deps, owner, session.id, call, signal)
        : runTool(deps, owner, session.id, call, signal),
  );
  const driver = opts.teacher ? opts.teacher(sessionDriver) : sessionDriver;
  /**
   * The first call of a turn to a client tool hands the client every such call of that turn at once (as an
   * OpenAI response does); the others then find theirs answered.
   */
  const askClient = async (
    deps: HarnessDeps,
    owner: Owner,
    sessionId: string,
    call: ModelCall,
    signal: AbortSignal,
  ) => {
    const batch = deps.sessions
      .get(owner, sessionId)
      .pendingCalls()
      .filter((c) => clientTools.has(c.name));
    if (!batch.some((c) => c.id === call.id)) return { ok: true };
    if (!opts.awaitClient) throw new Error("the run has client tools but no way to ask the client");
    const calls = batch.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments }));
    trace.event("client_wait", { calls });
    const { value: results, ms } = await ctx.waitOutside(() => opts.awaitClient!(calls, signal));
    trace.event("client_resume", { ms: Number(ms.toFixed(3)) });
    await deps.sessions.answerClientCalls(owner, sessionId, results, ms);
    return { ok: true };
  };
  const ctx = new RunContext(driver, trace, {
    temperature: opts.temperature,
    stop: opts.stop,
    onText: opts.onText,
    forceCall: opts.forceCall,
    maxTokensPerTurn: deps.config.maxTokensPerTurn,
    contextReserve: deps.config.contextReserveTokens,
    seed: input.seed,
    steering: input.steering ?? [],
    signal: opts.signal ?? new AbortController().signal,
    onProgress: opts.onProgress,
  });
  // what an export renders the run's samples from: the whole history, and the capabilities its prompt listed
  const traceHistory = () =>
    trace.event("history", {
      sessionId: session.id,
      keepToolResult: session.settings.keepToolResults,
      ...(capabilities ? { capabilities } : {}),
      messages: historyView(session, { elide: false }),
    });
  const budgetFor = (alias: string): StageBudget => layered(deps.stageBudget(alias), input.budgets);
  const limits: SoftLimits = layered(DEFAULT_SOFT_LIMITS, input.soft, deps.config.soft);
  try {
    let result: PolicyResult;
    if (policy === "hard") result = await runHard(ctx, workflow, budgetFor);
    else if (policy === "soft") result = await runSoft(ctx, limits, budgetFor, workflow.at(-1));
    else result = await runFixed(ctx, limits, policy);
    const finish: Finish = ctx.windowEnded
      ? "context"
      : result.stopped
        ? "error"
        : ctx.degenerate
          ? "degenerate"
          : result.budgetEnded
            ? "budget"
            : "answer";
    const degenerate = ctx.degenerate && { ...ctx.degenerate, turns: ctx.degenerateTurns };
    const { value: extracted } = await trace.measure("answer_extraction", async () => {
      // junk is not an answer, whatever else ended the run
      if (degenerate) return { answer: "", marked: false, grounded: undefined, cited: undefined };
      const found = extractAnswer(result.text);
      return {
        ...found,
        grounded: found.marked ? grounded(found.answer, readBy(session.history)) : undefined,
        cited: cited(result.text, [...readBy(session.history), ...handoffs(session.history)]),
      };
    });
    // what the answer is worth, in the answer and run_end events and the result alike
    const verdict = {
      ...(degenerate ? { degenerate } : {}),
      ...(extracted.grounded !== undefined ? { grounded: extracted.grounded } : {}),
      ...(extracted.cited !== undefined ? { cited: extracted.cited } : {}),
    };
    const correct = opts.expected === undefined ? undefined : judge(extracted.answer, opts.expected);
    const selectionAccuracy = input.expectedStages ? stageAccuracy(result.stages, input.expectedStages) : undefined;
    trace.event("answer", {
      finish,
      answer: extracted.answer,
      marked: extracted.marked,
      ...verdict,
      text: result.text.slice(0, 4000),
      stages: result.stages,
      ...(correct ? { correct } : {}),
      ...(selectionAccuracy !== undefined ? { selectionAccuracy } : {}),
    });
    await trace.measure("orchestration", async () => traceHistory());
    const time = trace.end();
    trace.event("run_end", {
      finish,
      ...verdict,
      time,
      switches: ctx.switches,
      rebuiltTokens: ctx.rebuiltTokens,
      reusedTokens: ctx.reusedTokens,
      generatedTokens: ctx.generatedTokens,
    });
    return {
      traceId,
      traceFile,
      policy,
      finish,
      answer: extracted.answer,
      marked: extracted.marked,
      text: result.text,
      ...verdict,
      stages: result.stages,
      switches: ctx.switches,
      modelLoads: ctx.modelLoads,
      rebuiltTokens: ctx.rebuiltTokens,
      reusedTokens: ctx.reusedTokens,
      generatedTokens: ctx.generatedTokens,
      time,
      ...(selectionAccuracy !== undefined ? { selectionAccuracy } : {}),
      ...(correct ? { correct } : {}),
    };
  } catch (err) {
    traceHistory();
    // whatever the last step reported, a run whose signal fired was cancelled (e.g. by a shutdown)
    const cancelled = (err as Error).name === "RunCancelledError" || Boolean(opts.signal?.aborted);
    trace.event("run_end", {
      finish: cancelled ? "cancelled" : "error",
      error: (err as Error).message,
      cancelled,
      time: trace.end(),
    });
    throw err;
  } finally {
    deps.liveTraces.delete(traceId);
    await deps.sessions.close(owner, session.id).catch(() => undefined);
  }
}

/** What the run read that an answer may come from: the user's messages and the external tools' results. */
function readBy(history: readonly HistoryMessage[]): string[] {
  return history.flatMap((m) =>
    m.role === "user" || (m.role === "tool" && !m.internal && !m.isError) ? [m.content] : [],
  );
}

/** What the stages handed off when they released (offload_lora's handoff): what a later stage answers from. */
export function handoffs(history: readonly HistoryMessage[]): string[] {
  return history.flatMap((m) =>
    m.role === "assistant"
      ? m.toolCalls.flatMap((c) =>
          c.name === OFFLOAD_LORA && typeof c.arguments.handoff === "string" ? [c.arguments.handoff] : [],
        )
      : [],
  );
}

async function runTool(deps: HarnessDeps, owner: Owner, sessionId: string, call: ModelCall, signal: AbortSignal) {
  const tool = deps.toolbox.tools.get(call.name);
  if (!tool) {
    await deps.sessions.rejectCall(owner, sessionId, call.id, `${call.name} is not a tool of this server`);
    return { ok: false, error: `unknown tool ${call.name}` };
  }
  const outcome = await deps.sessions.runExternalTool(owner, sessionId, {
    tool,
    args: call.arguments,
    callId: call.id,
    signal,
  });
  return outcome.ok ? { ok: true } : { ok: false, error: outcome.error };
}

/** Share of expected stages matched position by position. */
function stageAccuracy(actual: readonly string[], expected: readonly string[]): number {
  const matched = expected.filter((s, i) => actual[i] === s).length;
  return Number((matched / Math.max(expected.length, actual.filter((s) => s !== "base").length)).toFixed(4));
}
