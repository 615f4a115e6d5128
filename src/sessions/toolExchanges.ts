import {
  parseArguments,
  runWithTimeLimit,
  type ExternalTool,
  type ToolOutcome,
} from "../externalTools/ExternalTool.js";
import { InvalidArgumentsError, LimitError, PendingCallsError, UnknownCallError } from "./errors.js";
import { newCallId, internalResult } from "./exchanges.js";
import type { HistoryMessage } from "./history.js";
import { WEIGHT_ACTIONS } from "../library/weightActions.js";
import type { Session } from "./Session.js";

/*
 * The exchanges of a session with tools outside the model's weights: the server's external tools, the client's own
 * tools, and errors a client or the harness answers a model call with. Each runs under the session's lock.
 */

/**
 * Runs an external tool for a session and records the exchange: as the result of the model's call
 * `callId`, or as a prescribed exchange (a call attributed to the client, then its result). A failing
 * tool is a recorded error result, never a broken session.
 */
export function runExternalTool(
  session: Session,
  input: { tool: ExternalTool; args: Record<string, unknown>; callId?: string; signal: AbortSignal },
): Promise<ToolOutcome & { callId: string }> {
  return session.lock.run(async () => {
    session.touch();
    const { tool } = input;
    if (!session.externalTools.includes(tool.name))
      throw new LimitError(
        `${tool.name} is not enabled in this session (its tools: ${session.externalTools.join(", ") || "none"})`,
      );
    const call = input.callId ? session.pendingCall(input.callId) : undefined;
    if (!call && session.pendingCalls().length) throw new PendingCallsError(session.pendingCalls());
    // answering a call executes the model's own arguments; any the client passes override them
    const args = call ? { ...call.arguments, ...input.args } : input.args;
    const parsed = parseArguments(tool, args);
    // a prescribed call with bad arguments is the client's to fix: nothing is recorded
    if (!parsed.ok && !call) throw new InvalidArgumentsError(parsed.error);
    const answered = call ?? { id: newCallId(), name: tool.name, arguments: args };
    const outcome: ToolOutcome =
      call && call.name !== tool.name
        ? {
            ok: false,
            error: `${tool.name} refused: call ${call.id} is a ${call.name} call; it must be answered by ${call.name}`,
          }
        : !parsed.ok
          ? parsed
          : await runWithTimeLimit(tool, parsed.args, input.signal);
    const result: HistoryMessage = {
      role: "tool",
      callId: answered.id,
      name: answered.name,
      content: outcome.ok ? outcome.forModel : outcome.error,
      isError: !outcome.ok,
      internal: false,
    };
    if (call) session.append(result);
    else
      session.append(
        { role: "assistant", content: "", adapter: session.activeAdapter, author: "client", toolCalls: [answered] },
        result,
      );
    session.stage?.recordToolCall();
    return { ...outcome, callId: answered.id };
  });
}

/**
 * Answers a pending call of the model with an error of the client's own (the model reads it next turn):
 * any call can be answered, whatever its name or arguments.
 */
export function answerCall(session: Session, callId: string, error: string): Promise<{ callId: string; name: string }> {
  return session.lock.run(async () => {
    session.touch();
    const call = session.pendingCall(callId);
    session.append({
      role: "tool",
      callId: call.id,
      name: call.name,
      content: error,
      isError: true,
      internal: WEIGHT_ACTIONS.has(call.name),
    });
    return { callId: call.id, name: call.name };
  });
}

/**
 * Records the client's results of the model's calls to client-declared tools. `waitedMs` (the time the
 * client took) does not count against the active stage's time budget.
 */
export function answerClientCalls(
  session: Session,
  results: readonly { callId: string; content: string }[],
  waitedMs: number,
): Promise<void> {
  return session.lock.run(async () => {
    session.touch();
    const calls = results.map((r) => session.pendingCall(r.callId));
    const foreign = calls.filter((c) => !session.clientTools.includes(c.name));
    if (foreign.length)
      throw new UnknownCallError(
        `call(s) ${foreign.map((c) => c.id).join(", ")} are not calls of a client-declared tool`,
      );
    session.append(
      ...calls.map((call, i): HistoryMessage => ({
        role: "tool",
        callId: call.id,
        name: call.name,
        content: results[i]!.content,
        isError: false,
        internal: false,
      })),
    );
    session.stage?.pause(waitedMs);
    for (const _ of calls) session.stage?.recordToolCall();
  });
}

/** Answers a pending model call with an error the model reads (a harness guard refusing it). */
export function rejectCall(session: Session, callId: string, message: string): Promise<void> {
  return session.lock.run(async () => {
    const call = session.pendingCall(callId);
    session.append(internalResult(call, message, true));
  });
}
