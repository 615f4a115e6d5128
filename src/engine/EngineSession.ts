import type { AdapterVersion } from "./AdapterVersion.js";
import type {
  Conversation,
  GenerateOptions,
  GenerateResult,
  HistorySoFar,
  LogProbs,
  SwitchReport,
  WeightRequest,
} from "./types.js";

/** One KV cache a session holds: under the weights it has active, or idle under weights it left. */
export interface LaneState {
  /** "base", or the adapters' aliases joined with "+". */
  weights: string;
  active: boolean;
  /** `live` in the engine's memory, `spilled` saved aside (restored on return). */
  state: "live" | "spilled";
  tokens: number;
}

/** Evaluation an engine did ahead of time for a session, while nobody waited on it. */
export interface BackgroundWork {
  tokens: number;
  batches: number;
  ms: number;
}

/** What bringing a cache up to a prompt cost: tokens kept from the cache, tokens evaluated. */
export interface PrefillReport {
  reused: number;
  evaluated: number;
  ms: number;
}

/**
 * One conversation on an engine: its KV cache(s) and its active adapter set. The session keeps no history:
 * every call brings the whole conversation, and the engine keeps its cache a correct one for it under the
 * session's weights (never a cache computed under other weights).
 */
export interface EngineSession {
  readonly id: number;
  /** Tokens the session's context window holds. */
  readonly contextSize: number;
  /** null for the base, the alias for one adapter, "a+b" for several applied together. */
  readonly activeAdapter: string | null;
  /** The exact adapter versions in use: a session keeps the version it loaded even after its alias is refreshed. */
  readonly activeVersions: readonly AdapterVersion[];
  /** Tokens whose KV the active cache holds now. */
  readonly cachedTokens: number;
  /** Every cache this session holds (the active one first or not: see `active`). */
  laneStates(): LaneState[];

  /**
   * The weight switch: makes `to` the active weights (an alias, null for the base, or several aliases applied
   * together), with a cache correct for them over the whole conversation. Validates everything first: a refused
   * switch changes nothing.
   */
  switchWeights(to: WeightRequest, conversation: Conversation): Promise<SwitchReport>;

  /** The assistant's next turn under the session's weights (function calls returned, not executed). */
  generate(conversation: Conversation, options?: GenerateOptions): Promise<GenerateResult>;
  /** The full next-token distribution after the conversation's prompt, under the session's weights. */
  nextTokenLogProbs(conversation: Conversation): Promise<LogProbs>;
  /** Evaluates what the cache lacks of the conversation's prompt (a warm-up). */
  prefill(conversation: Conversation): Promise<PrefillReport>;
  /** Drops the active cache; the next call evaluates the prompt from the start. */
  clearCache(): Promise<void>;
  /** Tokens of the conversation's prompt as the model would read it now (what the window must hold). */
  promptTokens(conversation: Conversation): number;

  /**
   * The weight sets this session will probably switch to next, most likely first (each a list of aliases; [] is
   * the base): a hint. An engine that can evaluate while nobody waits may bring their caches up to the history
   * in the background (while a tool runs, between calls), so the switch finds little left to do; one that
   * cannot ignores it. `soFar`: the history as it stands now, when it has grown since the last call (the model's
   * turn whose calls are running): the caches may be brought up to its settled part, everything before the
   * first awaited result. Replaces the previous hint.
   */
  anticipate(next: readonly (readonly string[])[], soFar?: HistorySoFar): void;
  /** Evaluation done for this session in the background so far (tokens, decodes and their time). */
  backgroundWork(): BackgroundWork;

  /** Frees the session's caches and slot; later calls throw SessionClosedError. */
  close(): Promise<void>;
}
