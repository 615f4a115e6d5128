import type { ChatWrapper, LlamaModel } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../../engine/index.js";
import type { BackgroundScheduler } from "../background/BackgroundScheduler.js";
import type { LanePool } from "../cache/LanePool.js";
import type { PrefixStore } from "../cache/PrefixStore.js";

/** What a session needs from its engine. */
export interface LocalEngineServices {
  readonly model: LlamaModel;
  readonly chatWrapper: ChatWrapper;
  readonly pool: LanePool;
  /** Saved prompt prefixes new caches start from; undefined when the engine shares none (`rebuild`, no spill store). */
  readonly prefixes: PrefixStore | undefined;
  /** The engine's scheduler of evaluation ahead of time; every caller's evaluation runs through `work.foreground`. */
  readonly work: BackgroundScheduler;
  /** The current version of an alias; throws UnknownAdapterError for an alias not in the library. */
  resolve(alias: string): AdapterVersion;
  /** An activated LoRA's invocation sequence; undefined for an ordinary adapter. */
  invocationOf(version: AdapterVersion): readonly number[] | undefined;
  /** Keeps versions from being freed while a switch to them is under way. */
  pin(versions: readonly AdapterVersion[]): void;
  unpin(versions: readonly AdapterVersion[]): void;
  /** The session stopped using some versions (switch or close): the engine may free unused ones. */
  versionsReleased(): void;
  /** The session with this id closed and gave back everything it held. */
  closed(sessionId: number): void;
}
