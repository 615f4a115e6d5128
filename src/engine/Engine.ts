import type { EngineFeatures, EngineCapacity } from "./features.js";
import type { EngineSession } from "./EngineSession.js";
import type { AdapterInfo, AdapterSpec, CacheStrategy, Conversation, ModelInfo, TokenId } from "./types.js";

/** Where the engine's caches stand: contexts, sequences, idle and spilled caches, evictions. */
export interface CacheStats {
  strategy: CacheStrategy;
  contexts: number;
  /** Sequences (cache slots) in use, active and idle. */
  sequences: number;
  /** Caches sessions left behind under other weights, still in memory. */
  idleLanes: number;
  /** Caches saved aside to make room. */
  spilledLanes: number;
  spilledBytes: number;
  evictions: { spilled: number; dropped: number };
  /** Prompt tokens evaluated for a caller waiting on them (switches, turns) and ahead of time while nobody waited. */
  evaluatedTokens: { foreground: number; background: number };
  /**
   * Evaluation ahead of time (while tools run or between calls): its decodes, their time, how often it gave way to a
   * caller.
   */
  background: { enabled: boolean; batches: number; ms: number; yields: number; lanesStarted: number };
  /**
   * Saved prompt prefixes (the system prompt and function docs) new caches start from, per weight set and sharing
   * scope.
   */
  sharedPrefixes: { enabled: boolean; entries: number; bytes: number; hits: number; saved: number };
  /**
   * The engine's decode rounds (one context and weight set at a time): rounds run, the decodes they let through (more
   * than rounds: sessions decoded in one batch), and rounds that had to change a context's weights first. Absent where
   * a serving engine schedules its own decodes.
   */
  decodeRounds?: DecodeRoundStats;
}

export interface DecodeRoundStats {
  rounds: number;
  decodes: number;
  weightChanges: number;
}

export interface OpenSessionOptions {
  /** Start on one adapter (default: the base). */
  adapter?: string | null;
  /** Start on several adapters applied together. */
  adapters?: readonly string[];
  /**
   * Who may share the cached KV of this session's prompt prefix (the system prompt and the function docs):
   * sessions of one scope start their caches from a prefix another of them computed, so its evaluation is
   * saved but also observable (by timing) across the scope. The server's own prompt may use one scope for
   * everyone; a prompt a client wrote must use that client's own. Default: this session alone.
   */
  promptScope?: string;
}

/**
 * One frozen base model with its resident adapter versions and the sessions on them: what sessions, harness,
 * tools and the HTTP layers use, whichever backend serves the model. Errors thrown are `EngineError`s with
 * stable codes (./errors.ts).
 */
export interface Engine {
  readonly model: ModelInfo;
  readonly features: EngineFeatures;
  readonly capacity: EngineCapacity;
  /** What a weight switch does with a session's cache (one of `features.cacheStrategies`). */
  readonly cacheStrategy: CacheStrategy;
  /** Evaluation threads, when the engine runs in this process. */
  readonly threads?: number;

  /** Validates an adapter against the base model, then makes it resident under its alias. */
  addAdapter(spec: AdapterSpec): Promise<AdapterInfo>;
  /**
   * Points an alias at new bytes (or a new scale) atomically: new loads get the new version; sessions that
   * have the old one keep it until they release it, and then it is freed.
   */
  refreshAdapter(spec: AdapterSpec): Promise<{ previous: AdapterInfo; current: AdapterInfo }>;
  /** Takes an alias out of the library; sessions using it keep it until they release it. */
  removeAdapter(alias: string): Promise<AdapterInfo>;
  /** The current version of an alias; UnknownAdapterError if the library has none. */
  adapter(alias: string): AdapterInfo;
  /** The library: each alias's current version. */
  adapters(): AdapterInfo[];
  /** Every version held, current or still in use by a session. */
  residentVersions(): AdapterInfo[];
  /**
   * Frees the versions nothing holds any more (neither current, nor in use, nor cached); engines also run it
   * themselves.
   */
  collect(): Promise<void>;

  /** A new session with an empty cache; EngineCapacityError when `capacity.sessions` are open. */
  openSession(options?: OpenSessionOptions): Promise<EngineSession>;
  cacheStats(): CacheStats;

  /** Tokens of the rendered conversation, including the assistant turn's opening. */
  renderTokens(conversation: Conversation): TokenId[];
  /** Tokens of plain text, e.g. to measure training data. */
  tokenize(text: string): TokenId[];
  detokenize(tokens: readonly TokenId[]): string;

  dispose(): Promise<void>;
}
