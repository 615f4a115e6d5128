import { randomBytes } from "node:crypto";
import type { Response } from "express";
import type { TaskResult } from "../harness/runTaskUnderPolicy.js";
import type { TraceEvent } from "../harness/trace/Trace.js";
import type { OpenAIError } from "./errors.js";
import type { ChatMessage } from "./request.js";

/**
 * Token and switch counts of the work one response covered (a run spans several responses when it waits on the client).
 */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  /** Extension: the weight switches and their cache work. */
  weact: { switches: number; rebuilt_tokens: number; reused_tokens: number; model_turns: number };
}

/** The `weact` extension of a response: the run behind it. */
export interface RunInfo {
  trace_id: string;
  policy: string;
  /** This request continued a suspended run (true) or started one. */
  continued: boolean;
}

/**
 * One HTTP request's answer: a chat.completion object, or a stream of chunks ending in `[DONE]`. It counts the
 * usage of the model turns it covers from the run's trace events. The final stage's text is the content;
 * everything else of the run (other stages' text, switches, tools) goes only into the chunks' `weact` field.
 */
export class Responder {
  readonly id = `chatcmpl-${randomBytes(12).toString("base64url")}`;
  private readonly created = Math.floor(Date.now() / 1000);
  private text_ = "";
  private started = false;
  /** The last model turn stopped at its token limit: the answer is cut (finish_reason "length"). */
  private cut = false;
  finished = false;
  private readonly usage: Usage = {
    prompt_tokens: 0,
    completion_tokens: 0,
    total_tokens: 0,
    prompt_tokens_details: { cached_tokens: 0 },
    weact: { switches: 0, rebuilt_tokens: 0, reused_tokens: 0, model_turns: 0 },
  };

  constructor(
    private readonly res: Response,
    private readonly model: string,
    private readonly stream: boolean,
    private readonly includeUsage: boolean,
    private info: RunInfo,
  ) {}

  /** The final stage's text this response carries so far. */
  get content(): string {
    return this.text_;
  }

  /** The run started (its session exists): a stream can open now; errors before this are plain HTTP errors. */
  begin(info: RunInfo): void {
    this.info = info;
    if (!this.stream || this.started) return;
    this.started = true;
    this.res.writeHead(200, {
      "Content-Type": "text/event-stream",
      "Cache-Control": "no-cache",
      Connection: "keep-alive",
      "X-Accel-Buffering": "no",
    });
    this.chunk({ role: "assistant", content: "" }, null, { ...this.info });
  }

  /** Text of the final stage: the content. */
  text(chunk: string): void {
    this.text_ += chunk;
    if (this.stream && chunk) this.chunk({ content: chunk }, null);
  }

  /** Text of another stage: only in the extension field. */
  stageText(chunk: string, stage: string, adapter: string): void {
    if (this.stream && chunk) this.chunk({}, null, { stage, adapter, text: chunk });
  }

  /** A trace event of the run: counted into usage, and streamed (switches, stages, tools) in the extension field. */
  event(e: TraceEvent): void {
    const u = this.usage;
    if (e.type === "model_call") {
      const t = e.tokens as { prompt: number; cached: number; generated: number };
      u.prompt_tokens += t.prompt;
      u.prompt_tokens_details.cached_tokens += t.cached;
      u.completion_tokens += t.generated;
      u.total_tokens = u.prompt_tokens + u.completion_tokens;
      u.weact.model_turns++;
      this.cut = e.finish === "length";
    } else if (e.type === "adapter_control" && e.ok) u.weact.switches++;
    else if (e.type === "cache_rebuild") {
      u.weact.rebuilt_tokens += Number(e.tokens ?? 0);
      u.weact.reused_tokens += Number(e.reused ?? 0);
    }
    if (!this.stream || !this.started) return;
    if (e.type === "stage_start") this.chunk({}, null, { event: "stage_start", stage: e.stage, adapter: e.adapter });
    else if (e.type === "stage_end") this.chunk({}, null, { event: "stage_end", stage: e.stage, end: e.end });
    else if (e.type === "adapter_control")
      this.chunk({}, null, {
        event: "switch",
        stage: e.stage,
        action: e.action,
        author: e.author,
        ok: e.ok,
        active: e.active,
      });
    else if (e.type === "tool_call") this.chunk({}, null, { event: "tool", stage: e.stage, name: e.name, ok: e.ok });
  }

  /** The run waits on the client's tools: this response ends with them. */
  toolCalls(message: Extract<ChatMessage, { role: "assistant" }>, continuationId: string): void {
    const ext = { ...this.info, continuation_id: continuationId };
    if (this.stream) {
      this.begin(this.info);
      const calls = message.tool_calls!.map((c, index) => ({ index, ...c }));
      this.chunk({ tool_calls: calls }, null);
      this.end("tool_calls", ext);
    } else {
      this.json(
        { role: "assistant", content: message.content, tool_calls: message.tool_calls, refusal: null },
        "tool_calls",
        ext,
      );
    }
  }

  /** The run ended with its answer. */
  answer(result: TaskResult): void {
    const ext = {
      ...this.info,
      stages: result.stages,
      answer: result.answer,
      marked: result.marked,
      // the run's own finish: a degenerate run's content is its junk, not an answer
      finish: result.finish,
      ...(result.degenerate ? { degenerate: result.degenerate } : {}),
      ...(result.grounded !== undefined ? { grounded: result.grounded } : {}),
    };
    if (this.stream) {
      // the final text was streamed as it was decoded; a run whose final text came from elsewhere sends it now
      if (!this.text_ && result.text) this.text(result.text);
      this.end(this.cut ? "length" : "stop", ext);
    } else {
      // the same text a stream carries: what the final stage wrote in this response
      this.json(
        { role: "assistant", content: this.text_ || result.text, refusal: null },
        this.cut ? "length" : "stop",
        ext,
      );
    }
  }

  fail(err: OpenAIError): void {
    if (this.finished) return;
    this.finished = true;
    if (!this.started) {
      if (!this.gone) this.res.status(err.status).json(err.body);
      return;
    }
    // mid-stream: an error event the OpenAI clients raise, then the end
    this.write(err.body);
    if (!this.gone) this.res.end();
  }

  private end(finish: string, ext: Record<string, unknown>): void {
    this.chunk({}, finish, ext);
    if (this.includeUsage) this.write({ ...this.base(), choices: [], usage: this.usage });
    this.finished = true;
    if (this.gone) return;
    this.res.write("data: [DONE]\n\n");
    this.res.end();
  }

  private json(message: Record<string, unknown>, finish: string, ext: Record<string, unknown>): void {
    this.finished = true;
    if (this.gone) return;
    this.res.json({
      ...this.base("chat.completion"),
      choices: [{ index: 0, message, finish_reason: finish, logprobs: null }],
      usage: this.usage,
      weact: ext,
    });
  }

  private chunk(delta: Record<string, unknown>, finish: string | null, weact?: Record<string, unknown>): void {
    this.write({
      ...this.base(),
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
      ...(weact ? { weact } : {}),
    });
  }

  /** A client that went away gets nothing more (its run is being cancelled); writing to it would fail. */
  private get gone(): boolean {
    return this.res.writableEnded || this.res.destroyed;
  }

  private write(body: Record<string, unknown>): void {
    if (!this.gone) this.res.write(`data: ${JSON.stringify(body)}\n\n`);
  }

  private base(object = "chat.completion.chunk") {
    return { id: this.id, object, created: this.created, model: this.model };
  }
}
