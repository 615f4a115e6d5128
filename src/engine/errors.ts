/** Every error the engine throws on purpose: `code` is stable for programs, the message is for people. */
export abstract class EngineError extends Error {
  abstract readonly code: string;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The base model file is missing, unreadable, malformed, or would abort llama.cpp. */
export class ModelFileError extends EngineError {
  readonly code = "model_file";
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`model ${file}: ${reason}`);
  }
}

/** The model's chat template has no tool-call syntax: weight actions, being tool calls, could never be parsed. */
export class NoFunctionCallsError extends EngineError {
  readonly code = "no_function_calls";
  constructor(
    readonly file: string,
    readonly wrapper: string,
    readonly reason: string,
  ) {
    super(
      `model ${file}: ${reason} (node-llama-cpp chat wrapper: ${wrapper}). Use the tool-calling (Instruct) variant of the model, or a GGUF whose tokenizer.chat_template documents tools; \`weact-mcp doctor ${file}\` checks a file before serving it`,
    );
  }
}

/** An adapter file is missing, unreadable, malformed, or llama.cpp refused it. */
export class AdapterFileError extends EngineError {
  readonly code = "adapter_file";
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`adapter ${file}: ${reason}`);
  }
}

/** An adapter was made for another base model: its architecture or tensor shapes do not match. */
export class AdapterIncompatibleError extends EngineError {
  readonly code = "adapter_incompatible";
  constructor(
    readonly file: string,
    readonly mismatches: readonly string[],
  ) {
    super(`adapter ${file} does not fit the base model: ${mismatches.join("; ")}`);
  }
}

export class UnknownAdapterError extends EngineError {
  readonly code = "unknown_adapter";
  constructor(
    readonly alias: string,
    readonly known: readonly string[],
  ) {
    super(`unknown adapter "${alias}"; the library has: ${known.length ? known.join(", ") : "(none)"}`);
  }
}

export class DuplicateAdapterError extends EngineError {
  readonly code = "duplicate_adapter";
  constructor(readonly alias: string) {
    super(`an adapter with alias "${alias}" is already loaded`);
  }
}

/**
 * Every session the engine can hold is open (every sequence of every allowed context, every slot of a remote engine).
 */
export class EngineCapacityError extends EngineError {
  readonly code = "engine_capacity";
  constructor(
    readonly maxSessions: number,
    /** What raises the limit on this backend. */
    fix = "raise model.maxContexts / model.sequencesPerContext",
  ) {
    super(`all ${maxSessions} engine session slots are in use; close a session or ${fix}`);
  }
}

/** A set of adapters that cannot be applied together (an activated LoRA applies alone). */
export class InvalidAdapterSetError extends EngineError {
  readonly code = "invalid_adapter_set";
  constructor(
    readonly aliases: readonly string[],
    readonly reason: string,
  ) {
    super(`adapters ${aliases.join(" + ")} cannot be applied together: ${reason}`);
  }
}

/** The conversation cannot be rendered, e.g. a tool call still waits for its result. */
export class InvalidConversationError extends EngineError {
  readonly code = "invalid_conversation";
}

export class SessionClosedError extends EngineError {
  readonly code = "session_closed";
  constructor() {
    super("this engine session is closed");
  }
}

/** The rendered conversation does not fit in the session's context window. */
export class ContextOverflowError extends EngineError {
  readonly code = "context_overflow";
  constructor(
    readonly tokens: number,
    readonly contextSize: number,
    /** What gives a session a longer window on this backend. */
    fix = "raise model.contextSize",
  ) {
    super(
      `the conversation needs ${tokens} tokens but the session's context holds ${contextSize}; shorten the history or ${fix}`,
    );
  }
}

/**
 * A turn steered into a call that could not come back as one: the function is not callable now, or the turn's tokens
 * cannot hold the call (its forced start, the longest arguments the grammar may still need, its end).
 */
export class SteeredCallError extends EngineError {
  readonly code = "steered_call";
  constructor(
    message: string,
    /**
     * When the turn was too short for the call: the function, the tokens its call may take, the turn's tokens, and
     * whether the turn's own limit (`max_tokens`) or the room left in the context window fell short.
     */
    readonly shortfall?: { call: string; needed: number; available: number; limit: "max_tokens" | "context" },
  ) {
    super(message);
  }
}

/**
 * The serving engine cannot be reached (refused, reset, DNS): nothing was recorded, and the session is usable once it
 * is back.
 */
export class EngineUnavailableError extends EngineError {
  readonly code = "engine_unavailable";
  constructor(
    readonly engine: string,
    readonly reason: string,
  ) {
    super(
      `engine ${engine} is unavailable: ${reason}; nothing was changed, retry once it is back (engine.remote.url names it)`,
    );
  }
}

/** The serving engine did not answer in time; the request was cancelled and nothing was recorded. */
export class EngineTimeoutError extends EngineError {
  readonly code = "engine_timeout";
  constructor(
    readonly engine: string,
    readonly timeoutMs: number,
    /**
     * Set when the request never reached the engine: it waited that long for one of this many places
     * (engine.remote.maxInFlight).
     */
    readonly queuedFor?: number,
  ) {
    super(
      queuedFor === undefined
        ? `engine ${engine} sent nothing for ${timeoutMs} ms and the request was cancelled; nothing was changed (raise engine.remote.timeoutMs for a slow engine)`
        : `engine ${engine}: the request waited ${timeoutMs} ms for one of the ${queuedFor} requests in flight to end and was dropped before it was sent; nothing was changed (raise engine.remote.maxInFlight, or engine.remote.timeoutMs)`,
    );
  }
}

/** The serving engine answered with an error, or with an answer this backend cannot read. */
export class EngineRequestError extends EngineError {
  readonly code = "engine_error";
  constructor(
    readonly engine: string,
    readonly status: number,
    readonly detail: string,
  ) {
    super(
      status >= 200 && status < 300
        ? `engine ${engine} answered (HTTP ${status}) with what this backend cannot use: ${detail}`
        : `engine ${engine} refused the request (HTTP ${status}): ${detail}`,
    );
  }
}

/**
 * The serving engine's answer (or one event of a streamed answer) is longer than this server reads: the request was
 * cancelled and its connection closed as soon as the limit was crossed, so a huge or endless answer costs no memory.
 */
export class EngineResponseTooLargeError extends EngineError {
  readonly code = "engine_response_too_large";
  constructor(
    readonly engine: string,
    readonly maxBytes: number,
  ) {
    super(
      `engine ${engine} answered with more than ${maxBytes} bytes and the request was cancelled; nothing was changed (engine.remote.maxResponseBytes sets the limit: raise it only for an engine whose answers are that large)`,
    );
  }
}

/** The serving engine holds as many adapters as it is allowed to; loading another needs one unloaded first. */
export class AdapterCapacityError extends EngineError {
  readonly code = "adapter_capacity";
  constructor(
    readonly engine: string,
    readonly detail: string,
  ) {
    super(
      `engine ${engine} has no room for another adapter: ${detail}; unregister an adapter or raise the engine's adapter limit (README "Remote engines")`,
    );
  }
}

/** The backend cannot do this at all (a capability its engine lacks); `fix` says what would. */
export class UnsupportedFeatureError extends EngineError {
  readonly code = "unsupported_feature";
  constructor(
    readonly backend: string,
    readonly feature: string,
    readonly fix: string,
  ) {
    super(`${backend} does not support ${feature}: ${fix}`);
  }
}
