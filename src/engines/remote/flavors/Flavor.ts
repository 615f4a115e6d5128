import type { AdapterVersion, CacheStrategy, TokenId } from "../../../engine/index.js";
import type { EngineHttp } from "../client/EngineHttp.js";

/** What a serving engine can do, as the backend uses it (README "Remote engines" has the whole capability table). */
export interface FlavorFeatures {
  /** Adapters can be loaded and unloaded while it serves (else only the ones it started with can be mapped). */
  runtimeAdapterLoading: boolean;
  /**
   * The adapter form it loads: GGUF files (given at its start) or PEFT folders (under engine.remote.adapterDir), the
   * scale baked in.
   */
  adapterForm: "gguf" | "peft";
  /** Several adapters applied in one request (the `static` policy). */
  adapterSets: boolean;
  /**
   * Serves activated LoRAs (llama.cpp's `adapter.alora.invocation_tokens`): the adapter applies from its invocation on
   * and the base's cache before it is kept. Mainline vLLM and SGLang apply an adapter to every token of a request.
   */
  alora: boolean;
  /** Next-token log-probs: the whole vocabulary, or only the top ones the engine allows (vLLM's --max-logprobs). */
  logProbs: "full" | "top";
  /**
   * The log-probs it reports under a grammar are the grammar's: the tokens it forbids masked out and the rest
   * renormalized (vLLM applies xgrammar's bitmask to the logits its "raw" log-probs come from). Then a distribution is
   * asked for without a grammar, and a turn's log-probs are recomputed by teacher forcing, so they are the model's own
   * as the local engine reports them.
   */
  grammarMasksLogprobs: boolean;
  /**
   * Requests on the base name a registered adapter scaled by 0 instead of no adapter: vLLM 0.32's CPU build
   * sometimes computes a request without an adapter under the adapter of another request in its batch (a prefill of
   * the base beside a prefill under an adapter; measured: 2 times in 8 replays of the same requests, the base's next
   * distribution off by 3.47, and kept in its prefix cache), never a request that names one.
   */
  baseAsZeroAdapter: boolean;
  /** What a switch does with the engine's cache (see Engine.cacheStrategy). */
  cacheStrategy: CacheStrategy;
  /**
   * Sessions are bound to the engine's slots (`id_slot`): one session's cache lives in one slot. With it, every
   * request that samples evaluates the prompt's last token alone (after a prefill of the rest when needed), so the
   * log-probs of a turn do not depend on how much of the prompt happened to be cached.
   */
  slots: boolean;
  /** How to give a session a longer window, for ContextOverflowError. */
  contextLimit: string;
}

/**
 * What vLLM and SGLang have in common: PEFT folders loaded at runtime, one adapter a request, a scale baked in, a
 * prefix cache keyed by adapter.
 */
export const PEFT_ENGINE_FEATURES = {
  runtimeAdapterLoading: true,
  adapterForm: "peft",
  adapterSets: false,
  alora: false,
  logProbs: "top",
  grammarMasksLogprobs: false,
  baseAsZeroAdapter: false,
  cacheStrategy: "reuse",
  slots: false,
} as const satisfies Partial<FlavorFeatures>;

/** What the engine says about itself at connect. */
export interface EngineFacts {
  /** The model name requests carry (vLLM, SGLang) or the model file it serves (llama-server). */
  servedModel: string;
  /** Tokens one request's prompt and output may take. */
  contextSize: number;
  /** Slots for flavors that have them. */
  slots?: number;
  /** Its vocabulary size, when it reports one (checked against the local tokenizer). */
  vocabularySize?: number;
}

/** An adapter version as the engine names it: llama-server's adapter id, or the versioned name it was loaded under. */
export interface EngineAdapter {
  version: AdapterVersion;
  handle: number | string;
  /** The scale the request applies (1 when it is baked into the engine's copy). */
  requestScale: number;
}

/**
 * An adapter version made ready for the engine: the GGUF file, and for PEFT flavors the folder as the engine sees it.
 */
export interface PreparedAdapter {
  version: AdapterVersion;
  filePath: string;
  /** vLLM/SGLang: the versioned name and the PEFT folder under engine.remote.adapterDir. */
  peft?: { name: string; enginePath: string };
}

/**
 * One completion: the prompt as token ids, under `adapters` (none = the base). `maxTokens` 0 only evaluates the prompt.
 */
export interface CompletionRequest {
  slot?: number;
  adapters: readonly EngineAdapter[];
  prompt: readonly TokenId[];
  maxTokens: number;
  temperature: number;
  seed?: number;
  topK?: number;
  topP?: number;
  grammar?: string;
  logitBias?: ReadonlyMap<TokenId, number>;
  /** Top log-probs per generated token. */
  topLogprobs?: number;
  stop?: readonly string[];
  /** Special-token texts that must appear in the output text (the call syntax's). */
  showSpecial?: readonly string[];
  /**
   * Slot flavors: how many of the prompt's tokens the session knows its slot holds, computed by it under these
   * very adapters (the prompt agrees with them), so the engine may continue from its cache. Undefined: what
   * the slot holds is not known (a new session, a switch, after an error or a restart), and the engine
   * evaluates the whole prompt (llama-server: cache_prompt off).
   */
  reuse?: number;
  /**
   * The session's own salt for engines with a shared prefix cache (vLLM's cache_salt): no other session can hit its
   * cache or time it.
   */
  cacheSalt?: string;
  /** Text as it is generated (the request is streamed). */
  onText?: (textSoFar: string, generated: number) => void;
  signal?: AbortSignal;
}

export interface GeneratedLogprob {
  token: TokenId;
  logprob: number;
  top: { token: TokenId; logprob: number }[];
}

export interface CompletionResult {
  /** The generated text, special tokens of `showSpecial` included. */
  text: string;
  /** Generated token ids, when the engine returns them. */
  tokens?: TokenId[];
  generated: number;
  finish: "stop" | "length";
  /** Prompt tokens served from the engine's cache; undefined when it does not say. */
  cached?: number;
  /** Prompt tokens it evaluated. */
  evaluated?: number;
  /** Per generated token, when asked; may miss tokens (llama-server drops those that end inside a character). */
  logprobs?: GeneratedLogprob[];
}

/** The serving engines this backend speaks. */
export type FlavorName = "llama-server" | "vllm" | "sglang";

/**
 * One serving engine's API: how to learn what it serves, make adapter versions servable, and run a completion.
 * Everything else (sessions, versions, grammar, calls, accounting) is the same for every flavor.
 */
export interface Flavor {
  readonly name: FlavorName;
  /** How errors and listings name it ("vLLM at http://..."). */
  readonly title: string;
  readonly features: FlavorFeatures;
  /** The engine's own facts; fails with a clear error when it is not this flavor or serves no model. */
  inspect(http: EngineHttp, model: string | undefined): Promise<EngineFacts>;
  /**
   * The engine's tokenization of `text` (special tokens parsed), to check the local tokenizer is the engine's;
   * undefined when it has no such endpoint.
   */
  tokenize(http: EngineHttp, text: string): Promise<TokenId[] | undefined>;
  /** Makes a version servable and returns how requests name it. */
  register(http: EngineHttp, adapter: PreparedAdapter): Promise<EngineAdapter>;
  /** The engine may forget a version no session holds any more. */
  unregister(http: EngineHttp, adapter: EngineAdapter): Promise<void>;
  complete(http: EngineHttp, request: CompletionRequest): Promise<CompletionResult>;
  /**
   * Re-reads what the engine holds (llama-server: its adapters, by id and content), after which `register` maps
   * versions by it. Resolves true when the engine is not the process it was (it restarted: every cache in it is
   * gone). `freeSlot` is a slot no session holds, for a check that needs one.
   */
  reset(http: EngineHttp, freeSlot: number): Promise<boolean>;
}

/**
 * The engine no longer knows an adapter a request named (it restarted and lost its runtime-loaded adapters): the
 * engine registers its versions again and repeats the request once.
 */
export class AdapterLostError extends Error {
  constructor(readonly detail: string) {
    super(detail);
    this.name = "AdapterLostError";
  }
}
