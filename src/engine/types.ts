import type { AdapterVersion } from "./AdapterVersion.js";

/** A token of the base model's vocabulary. */
export type TokenId = number;

/** Next-token log-probs (natural log), by token id: the full distribution over the vocabulary. */
export type LogProbs = Map<TokenId, number>;

/** The logging surface an engine needs; a pino logger satisfies it. */
export interface EngineLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/**
 * `rebuild` (the paper's): clear the cache and re-prefill the history under the new weights on every switch.
 * `reuse`: keep each session's cache per weight set (a lane) and, returning to one, evaluate only the tokens
 * appended since it was last used. Both always give the cache a fresh context would compute.
 */
export type CacheStrategy = "rebuild" | "reuse";

/**
 * The weights a session asks to switch to, by alias: one adapter's alias, null for the base, or several aliases applied
 * together. The engine resolves it to a `WeightSet` (the exact versions).
 */
export type WeightRequest = string | null | readonly string[];

/** The base model an engine serves. */
export interface ModelInfo {
  /** Where the weights are: a file path for a local engine, the model's name or address for a remote one. */
  filePath: string;
  sha256: string;
  architecture: string;
  name: string | undefined;
  trainContextSize: number;
  sizeBytes: number;
  /** The name of the chat format the engine renders conversations with. */
  chatWrapper: string;
  /** Tokens in the vocabulary prompts are rendered with: every token id an adapter names lies below it. */
  vocabularySize: number;
}

export interface AdapterSpec {
  alias: string;
  /** The GGUF LoRA: the adapter's identity (its content hash names the version) and what llama.cpp loads. */
  filePath: string;
  /** Multiplies the adapter's own alpha/rank scaling. */
  scale: number;
  /**
   * The same adapter as a PEFT folder, for engines that load PEFT (vLLM, SGLang); without it one is exported from the
   * GGUF.
   */
  peftDir?: string;
}

/** A resident adapter version. Its identity everywhere (caches, traces, listings) is (alias, sha256, scale). */
export interface AdapterInfo {
  /** The version's identity. */
  version: AdapterVersion;
  /** `version.toString()` ("alias@sha256xscale"): the same identity as a string, for listings and maps. */
  id: string;
  alias: string;
  filePath: string;
  scale: number;
  sha256: string;
  /** The PEFT folder's hash, where the engine loads that folder (AdapterSpec.peftDir) and it is part of the version. */
  peftSha256?: string;
  rank: number;
  alpha: number | undefined;
  targetTensors: number;
  sizeBytes: number;
  /**
   * An activated LoRA's invocation sequence (llama.cpp's `adapter.alora.invocation_tokens`): the adapter applies
   * only from the start of its last occurrence in the prompt on, and not at all when the prompt lacks it.
   * Undefined for an ordinary LoRA, which applies to every token.
   */
  invocationTokens?: readonly TokenId[];
}

/**
 * A JSON schema object describing a function's parameters (the subset the engine's function-calling grammar supports).
 */
export type JsonSchemaObject = Readonly<Record<string, unknown>>;

export interface FunctionSpec {
  description: string;
  parameters?: JsonSchemaObject;
}

export interface AnsweredCall {
  name: string;
  arguments: unknown;
  result: string;
  /** The call exactly as the model emitted it (from GenerateResult), so re-rendering reproduces its tokens. */
  raw?: unknown;
}

/** A call of the model's last turn whose result is not back yet (its tool is running). */
export type AwaitedCall = Omit<AnsweredCall, "result">;

export type ChatTurn =
  | { role: "system"; text: string }
  | { role: "user"; text: string }
  | { role: "assistant"; text: string; calls?: readonly AnsweredCall[] };

/**
 * What the engine renders with the model's chat template. `functions` is documented in the prompt and
 * stays the same for a session, so switching adapters never changes the prompt's prefix.
 */
export interface Conversation {
  turns: readonly ChatTurn[];
  functions: Readonly<Record<string, FunctionSpec>>;
}

/**
 * The history while the caller is busy: `conversation` ends with the model's turn (with the calls answered so
 * far), and that turn also made the `awaiting` calls, whose results are not back yet. What comes before those
 * results is settled: an engine may evaluate it ahead of time.
 */
export interface HistorySoFar {
  conversation: Conversation;
  awaiting: readonly AwaitedCall[];
}

export interface GenerateOptions {
  /** The documented functions the model may call now (the function-calling grammar); default: all. */
  callable?: readonly string[];
  maxTokens?: number;
  /** 0 = greedy. */
  temperature?: number;
  seed?: number;
  topK?: number;
  topP?: number;
  /** Return the k most likely tokens (natural log-probs) at each generated position. */
  topLogprobs?: number;
  /** Logit bias by token text (special tokens such as "<tool_call>" included). */
  tokenBias?: Readonly<Record<string, number>>;
  /**
   * Steer the response into a tool call: the chat template's call prefix (and `name`, when given) is forced
   * token by token, then the function-calling grammar and the model's own logits choose the rest, closed in time
   * to end within `maxTokens`. A backend that can bound the call refuses a turn too short for it
   * (`SteeredCallError`) before generating anything.
   */
  steerToolCall?: { name?: string };
  signal?: AbortSignal;
  /** Called as tokens are generated, with the count so far (for progress reporting). */
  onToken?: (generated: number) => void;
  /** Called with each piece of the response's text as it is decoded (not the function calls' text): for streaming. */
  onText?: (chunk: string) => void;
  /** Texts that end the response when generated (not included in it). */
  stop?: readonly string[];
}

export interface GeneratedCall {
  name: string;
  arguments: unknown;
  raw?: unknown;
}

export interface TokenLogprob {
  token: number;
  text: string;
  logprob: number;
  top: { token: number; text: string; logprob: number }[];
}

export type FinishReason = "stop" | "tool_calls" | "length" | "cancelled";

export interface TokenAccounting {
  /** Tokens of the rendered prompt. */
  prompt: number;
  /** Prompt tokens whose KV was already in the sequence. */
  cached: number;
  /** Prompt tokens evaluated by this call. */
  evaluated: number;
  generated: number;
}

export interface GenerateResult {
  text: string;
  calls: GeneratedCall[];
  finishReason: FinishReason;
  adapter: string | null;
  tokens: TokenAccounting;
  /** Tokens of the session's context window still free after this turn. */
  contextRemaining: number;
  timings: {
    /** Waiting for the session's cache (the engine's other work on it). */
    queueMs: number;
    prefillMs: number;
    decodeMs: number;
    logprobsMs: number;
    totalMs: number;
  };
  logprobs?: TokenLogprob[];
}

export interface SwitchReport {
  from: string | null;
  to: string | null;
  /** The weight change itself: no file I/O, no model reload. */
  switchMs: number;
  /** `rebuild` re-prefilled the history; `reuse` continued (or started) a lane; `unchanged`: same weights. */
  strategy: "rebuild" | "reuse" | "unchanged";
  /**
   * Bringing the cache up to the history under the new weights: `tokens` evaluated, `reused` kept from a
   * cache computed under the same weights, `restored` of them read back from a saved state (a spilled lane, or
   * a shared prompt prefix), `shared` of those from a prompt prefix another session computed; `ms` in all.
   */
  rebuild: { tokens: number; reused: number; restored: number; shared: number; ms: number };
  queueMs: number;
}
