import { join } from "node:path";
import { PACKAGE_ROOT } from "../../src/paths.js";

/**
 * The entity tables the trained demo library's facts come from (facts.ts reads them): training's own, so src/ never
 * names them.
 */
export const TRAINING_ENTITIES = join(PACKAGE_ROOT, "training", "corpus", "entities");

/** weact-train's sources (a CMake program), which scripts/llama-cpp-build.sh builds against its cached static ggml. */
export const TRAINER_SOURCES = join(PACKAGE_ROOT, "training", "trainer");
