import type { CacheStrategy } from "../../../../engine/index.js";
import { RebuildStrategy } from "./RebuildStrategy.js";
import { ReuseStrategy } from "./ReuseStrategy.js";
import type { SwitchStrategy } from "./SwitchStrategy.js";

export type { SwitchingSession, SwitchOutcome, SwitchStrategy } from "./SwitchStrategy.js";

/** The strategy object for a configured cache strategy (chosen once, when the engine is created). */
export function switchStrategy(name: CacheStrategy): SwitchStrategy {
  return name === "reuse" ? new ReuseStrategy() : new RebuildStrategy();
}
