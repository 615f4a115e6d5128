import type { AdapterVersion, CacheStrategy, ChatCodec, EngineCapacity } from "../../../engine/index.js";
import type { CompletionRequest, CompletionResult, Flavor } from "../flavors/Flavor.js";

/** What a session needs of its engine. */
export interface RemoteEngineServices {
  readonly codec: ChatCodec;
  readonly flavor: Flavor;
  readonly capacity: EngineCapacity;
  readonly cacheStrategy: CacheStrategy;
  readonly engineLabel: string;
  /** Log-probs to ask for when a full distribution is wanted (the vocabulary, or what the engine allows). */
  readonly maxLogprobs: number;
  /** What gives a session a longer window on this engine (ContextOverflowError's fix). */
  readonly contextLimit: string;
  /** The current version of an alias; throws UnknownAdapterError for an alias not in the library. */
  resolve(alias: string): AdapterVersion;
  /** Keeps versions from being unregistered while a switch to them is under way. */
  pin(versions: readonly AdapterVersion[]): void;
  unpin(versions: readonly AdapterVersion[]): void;
  /** One completion under `versions` (a planted `flavor` in tests). */
  complete(
    versions: readonly AdapterVersion[],
    request: Omit<CompletionRequest, "adapters">,
    flavor?: Flavor,
  ): Promise<CompletionResult>;
  noAdapterSets(): Error;
  /** An activated LoRA's invocation sequence; undefined for an adapter that applies to every token. */
  invocationOf(version: AdapterVersion): readonly number[] | undefined;
  /** Refuses a set of several adapters holding an activated LoRA (InvalidAdapterSetError): it applies alone. */
  ensureApplicable(versions: readonly AdapterVersion[]): void;
  /** The session stopped using some versions (a switch): the engine may unregister unused ones. */
  versionsReleased(): void;
  /** The session with this id closed and gave back its slot. */
  closed(sessionId: number, slot: number | undefined): void;
}
