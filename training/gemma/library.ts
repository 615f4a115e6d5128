import { join } from "node:path";
import { PACKAGE_ROOT } from "../../src/paths.js";

/** The real base model the Gemma library adapts (`weact-mcp fetch-model gemma-3-270m`). */
export const GEMMA_MODEL = "gemma-3-270m";

/**
 * The library's harness limits (its config files carry them): the adapters' turns are short (the longest trained one
 * is ~45 tokens), and the comparison policies' runs, which no adapter releases, end after a minute of a 270M model
 * on 2 cores rather than ten.
 */
export const GEMMA_HARNESS = { maxTokensPerTurn: 128, soft: { turns: 12, tokens: 1024, seconds: 60 } };

/**
 * Stage budgets of the library's manifest. The write stage gets one turn: its adapter writes the answer and releases
 * in it. (The budget dates from before the engine's inlineCallView, when node-llama-cpp 3.21.1 turned that release
 * into a call of another function and the harness had to end the stage; it still bounds a writer that does not
 * release.)
 */
export const GEMMA_STAGE_BUDGETS: Readonly<Record<string, { turns: number }>> = { write: { turns: 1 } };

/** The shipped Gemma 3 library: adapters, manifest, config, task files and training record. */
export const GEMMA_DIR = join(PACKAGE_ROOT, "models", "gemma3");

/** The Python side's sources and pinned requirements. */
export const PYTHON_SOURCES = join(PACKAGE_ROOT, "training", "gemma");
