import { join } from "node:path";
import { sha256File } from "../../src/gguf/index.js";
import type { LibraryEntry } from "../../src/library/manifest.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { ensureRealModelAdapters, testAdapterDir } from "../../testkit/realModelAdapters.js";
import type { ShownCapability } from "./capabilities.js";

/** The chooser's committed files: the LoRA, its training record, the held-out histories the decision check replays. */
export const CHOOSER_DIR = join(PACKAGE_ROOT, "models", "qwen-chooser");

/** The taught backbone `fetch-model` makes: Qwen2.5-Coder-0.5B-Instruct with the chooser LoRA merged into it. */
export const CHOOSER_BACKBONE = "qwen2.5-coder-0.5b-weact";

/** The files in CHOOSER_DIR. */
export const CHOOSER_FILES = {
  lora: join(CHOOSER_DIR, "chooser.gguf"),
  training: join(CHOOSER_DIR, "training.json"),
  histories: join(CHOOSER_DIR, "held-out.jsonl"),
};

/** A test LoRA's stage: one short turn, so that a run's time goes to the base's decisions. */
export const TEST_STAGE = { turns: 1, tokens: 24, seconds: 30 };

/**
 * A drawn library served with the test LoRAs of `model`'s shape (made in testAdapterDir(model)): each capability under
 * its alias, description and texts, with the test LoRA of its role. What the chooser's checks serve, so that what they
 * count is the base's decisions, not its adapters' answers.
 */
export async function testLibraryEntries(model: string, library: readonly ShownCapability[]): Promise<LibraryEntry[]> {
  const adapters = ensureRealModelAdapters(model, testAdapterDir(model), 0.03);
  const baseSha256 = await sha256File(model);
  // a capability the runs never need (a distractor) is served with plan's test LoRA: only its listing matters
  const file = (role: string) => adapters[role === "search" || role === "write" ? role : "plan"];
  return library.map((c) => ({
    alias: c.alias,
    description: c.description,
    activation: c.activation,
    release: c.release,
    file: `${c.alias}.gguf`,
    filePath: file(c.role),
    scale: 1,
    baseSha256,
    budget: TEST_STAGE,
  }));
}

/** The Qwen capability library (`--library qwen`): plan, search and write over the taught backbone. */
export const QWEN_LIBRARY_DIR = join(PACKAGE_ROOT, "models", "qwen");

/**
 * The library's harness limits (its config.json carries them): a stage's turns are short (the longest trained one is
 * a search handoff of two sentences), and the comparison policies' runs, which no adapter releases, end after two
 * minutes of a 0.5B model on 2 cores.
 */
export const QWEN_HARNESS = { maxTokensPerTurn: 160, soft: { turns: 16, tokens: 1536, seconds: 120 } };
