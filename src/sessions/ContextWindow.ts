import type { Engine } from "../engine/index.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { Logger } from "../log.js";
import { internalResult } from "./exchanges.js";
import type { HistoryMessage, ToolCallRecord } from "./history.js";
import { refuseUnfittable, type InputField } from "./inputWindow.js";
import { exchangeMessage, OFFLOAD_LORA } from "../library/weightActions.js";
import type { Session } from "./Session.js";

/**
 * The context window of a session, as `SessionService` answers for it: input from outside that cannot fit, the tokens
 * the history takes as the model reads it, and room made by eliding the oldest external tool results.
 */
export class ContextWindow {
  constructor(
    /** The running server's engine and adapter library (a `SessionRuntime`), read at each call. */
    private readonly runtime: { readonly engine: Engine; readonly library: AdapterLibrary },
    private readonly logger: Logger,
  ) {}

  /** See `SessionService.refuseUnfittable`. */
  refuseUnfittable(fields: readonly InputField[]): Promise<void> {
    const { engine } = this.runtime;
    return refuseUnfittable(fields, { size: engine.capacity.contextSize, tokenize: (text) => engine.tokenize(text) });
  }

  /**
   * The session's window: its size, the tokens its history takes as the model reads it now, and what releasing the
   * active adapter would add (a harness-made release exchange; 0 on the base).
   */
  usage(session: Session): { size: number; used: number; release: number } {
    const used = session.engine.promptTokens(session.conversation());
    const active = session.activeAdapter;
    if (active === null || !session.settings.weightActions)
      return { size: session.engine.contextSize, used, release: 0 };
    const call: ToolCallRecord = { id: "call_measure", name: OFFLOAD_LORA, arguments: {} };
    const exchange: HistoryMessage[] = [
      { role: "assistant", content: "", adapter: active, author: "harness", toolCalls: [call] },
      internalResult(
        call,
        `${exchangeMessage(this.runtime.library.get(active)?.entry, OFFLOAD_LORA, active)} [stage ended by the harness: the context window is full]`,
        false,
      ),
    ];
    return {
      size: session.engine.contextSize,
      used,
      release: session.engine.promptTokens(session.conversation([...session.history, ...exchange])) - used,
    };
  }

  /**
   * Under the session's lock, the oldest external tool results still read in full become the keep_tool_result
   * marker, one at a time, until `needed` tokens are freed or none is left.
   */
  async elideToolResults(
    session: Session,
    needed: number,
  ): Promise<{ elided: number; callIds: string[]; freedTokens: number }> {
    return session.lock.run(async () => {
      const before = session.engine.promptTokens(session.conversation());
      const callIds: string[] = [];
      let freed = 0;
      for (
        let result = session.oldestVerbatimResult();
        result && freed < needed;
        result = session.oldestVerbatimResult()
      ) {
        session.elide(result);
        callIds.push(result.callId);
        freed = before - session.engine.promptTokens(session.conversation());
      }
      if (callIds.length)
        this.logger.info(
          { session: session.id, results: callIds.length, freedTokens: freed },
          "older tool results elided to make room in the context window",
        );
      return { elided: callIds.length, callIds, freedTokens: freed };
    });
  }
}
