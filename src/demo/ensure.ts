import type { Logger } from "../log.js";
import { PACKAGE_ROOT } from "../paths.js";
import { demoWeightsExist, generateDemoWeights, demoWeightPaths, type DemoWeights } from "./demoWeights.js";

/** The demo model and adapters, generated on first use (a second or two; a few MB, git-ignored). */
export function ensureDemoWeights(logger?: Logger, root: string = PACKAGE_ROOT): DemoWeights {
  if (demoWeightsExist(root)) return demoWeightPaths(root);
  logger?.info({ root }, "generating the demo model and adapters");
  return generateDemoWeights(root);
}
