/**
 * Static merges of the library's LoRA adapters into one, as PEFT's `add_weighted_adapter` makes them, without
 * Python.
 */
export {
  mergeAdapters,
  type MergeAdaptersOptions,
  type MergeAdaptersResult,
  type MergeInput,
} from "./mergeAdapters.js";
export { mergeLora, type LoraFactors, type MergeOptions } from "./methods.js";
export { uniformDraws } from "./uniformDraws.js";
export { LoraMergeError } from "./errors.js";
export {
  effectiveSettings,
  MERGE_METHODS,
  MergeSettingsSchema,
  type MergeMethod,
  type MergeSettings,
} from "./settings.js";
