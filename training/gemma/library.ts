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
 * Stage budgets of the library's manifest. The write stage gets one turn: its adapter writes the answer and then
 * `offload_lora({})`, which node-llama-cpp 3.21.1 does not parse as written after text in its inline call syntax (the
 * model writes " off" at probability 1.0 and a call of run_code or search comes out; the plan and search adapters'
 * calls, which carry arguments, parse): after that one turn the harness releases the stage, with the answer written.
 */
export const GEMMA_STAGE_BUDGETS: Readonly<Record<string, { turns: number }>> = { write: { turns: 1 } };

/** The shipped Gemma 3 library: adapters, manifest, config, task files and training record. */
export const GEMMA_DIR = join(PACKAGE_ROOT, "models", "gemma3");

/** The Python side's sources and pinned requirements. */
export const PYTHON_SOURCES = join(PACKAGE_ROOT, "training", "gemma");

/**
 * The random Gemma adapters the tests use: the default library's aliases and texts on Gemma's shapes, so the data
 * step renders the function docs the shipped library will show.
 */
export const GEMMA_TEST_MANIFEST = join(GEMMA_DIR, "test-adapters", "manifest.json");
