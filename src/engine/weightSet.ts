import type { WeightSet } from "./types.js";

/** The aliases of a weight set ([] for the base). */
export const aliasesOf = (to: WeightSet): readonly string[] => (to === null ? [] : typeof to === "string" ? [to] : to);
