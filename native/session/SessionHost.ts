import type { ChatWrapper, LlamaModel } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../src/engine/index.js";
import type { LaneKey } from "../cache/LaneKey.js";
import type { LanePool } from "../cache/LanePool.js";
import type { AdapterWeight } from "../llama/internals.js";

/** What a session needs from its engine. */
export interface SessionHost {
  readonly model: LlamaModel;
  readonly chatWrapper: ChatWrapper;
  readonly pool: LanePool;
  /** The current version of an alias; throws UnknownAdapterError for an alias not in the library. */
  resolve(alias: string): AdapterVersion;
  weightOf(version: AdapterVersion): AdapterWeight;
  /** Keeps versions from being freed while a switch to them is under way. */
  pin(versions: readonly AdapterVersion[]): void;
  unpin(versions: readonly AdapterVersion[]): void;
  /** The session stopped using some versions (switch or close): the engine may free unused ones. */
  versionsReleased(): void;
  /** The session with this id closed and gave back everything it held. */
  closed(sessionId: number): void;
}

/** Names a weight set exactly; tests swap in a careless one to prove the key matters. */
export type LaneKeyOf = (versions: readonly AdapterVersion[]) => LaneKey;
