import type { ChatCodec, EngineLogger } from "../../engine/index.js";
import type { FlavorName } from "./flavors/index.js";

/**
 * The longest engine answer read by default: twice the largest the backend asks for, llama-server's full next-token
 * distribution at connect (every token with its bytes), measured at 26 MB for Gemma 3's 262k-token vocabulary.
 */
export const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

/** How the remote backend reaches its serving engine. */
export interface RemoteEngineOptions {
  /** The engine's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  flavor: FlavorName;
  /** The served base model's name (vLLM, SGLang); default: the first base model the engine lists. */
  model?: string;
  /** PEFT flavors: the folder adapters are placed in, as the engine sees it. */
  adapterDir?: string;
  /** The same folder as this server writes it, when it is mounted elsewhere here (default: adapterDir). */
  localAdapterDir?: string;
  /**
   * llama-server: the sha256 of adapter files it loaded, by the path it reports, where that path is not readable here.
   */
  adapterSha256?: Readonly<Record<string, string>>;
  /** Bearer token for the engine's API. */
  apiKey?: string;
  /** Longest wait for an answer, or between two chunks of a stream. */
  timeoutMs: number;
  /** Engine requests in flight at once. */
  maxInFlight: number;
  /**
   * The longest answer (or streamed event) read from the engine, in bytes; a longer one is cancelled (default
   * DEFAULT_MAX_RESPONSE_BYTES).
   */
  maxResponseBytes?: number;
  /** Sessions at once (default: the engine's slots for llama-server, else 64). */
  sessions?: number;
  /** Tokens of one session's window (default and upper bound: what the engine allows per request or slot). */
  contextSize?: number;
  /** Top log-probs a PEFT flavor returns per position (vLLM's --max-logprobs, default 20). */
  maxLogprobs?: number;
  /** The base model's tokenizer and chat template; the engine owns it from here (disposes it). */
  codec: ChatCodec;
  logger: EngineLogger;
}
