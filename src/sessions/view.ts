import { elidedResults, elisionMarker, type HistoryMessage } from "./history.js";
import type { Session } from "./Session.js";

/**
 * The history as the model reads it (keep_tool_result applied), for every caller alike; with `elide: false`
 * every result in full (what traces record, so an export can apply the policy as of any point).
 * Internal fields such as raw call tokens stay out.
 */
export function historyView(session: Session, opts: { elide: boolean } = { elide: true }) {
  const keep = session.settings.keepToolResults;
  const elided: Set<HistoryMessage> = opts.elide ? elidedResults(session.history, keep) : new Set();
  return session.history.map((m: HistoryMessage) => {
    switch (m.role) {
      case "assistant":
        return {
          role: m.role,
          content: m.content,
          adapter: m.adapter,
          author: m.author,
          tool_calls: m.toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
        };
      case "tool":
        return {
          role: m.role,
          call_id: m.callId,
          name: m.name,
          content: elided.has(m) ? elisionMarker(m, keep) : m.content,
          is_error: m.isError,
          internal: m.internal,
          ...(m.elided ? { elided: true } : {}),
        };
      default:
        return { role: m.role, content: m.content };
    }
  });
}

export function sessionView(session: Session) {
  return {
    session_id: session.id,
    task: session.task,
    active_adapter: session.activeAdapter,
    pending_calls: session.pendingCalls().map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
    tools: [...session.externalTools],
    keep_tool_result: session.settings.keepToolResults,
    cached_tokens: session.engine.cachedTokens,
    kv_lanes: session.engine.laneStates(),
    created_at: new Date(session.createdAt).toISOString(),
    last_active_at: new Date(session.lastActiveAt).toISOString(),
    history: historyView(session),
  };
}
