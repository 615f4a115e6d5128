import type { ChatWrapper, LlamaModel } from "node-llama-cpp";
import type { AdapterTable } from "../adapters/AdapterTable.js";
import type { BackgroundScheduler } from "../decoding/BackgroundScheduler.js";
import type { LanePool } from "./LanePool.js";
import type { PrefixStore } from "./PrefixStore.js";

/** The engine's parts a session works with, each used through its own methods. */
export interface EngineParts {
  readonly model: LlamaModel;
  readonly chatWrapper: ChatWrapper;
  /** The library as the engine sees it: each alias's current version, pins, activated LoRAs' invocations. */
  readonly adapters: AdapterTable;
  readonly pool: LanePool;
  /** Saved prompt prefixes new caches start from; undefined when the engine shares none (`rebuild`, no spill store). */
  readonly prefixes: PrefixStore | undefined;
  /** Evaluation ahead of time; every caller's evaluation is marked on it (`beginForeground`). */
  readonly scheduler: BackgroundScheduler;
  /**
   * model.batchInvariant: a cache keeps only what prompt pieces computed (never a token decoded alone, as a turn's last
   * prompt token and its generated ones are), so a lane kept, rebuilt or caught up ahead of time holds the same numbers.
   */
  readonly batchInvariant: boolean;
}
