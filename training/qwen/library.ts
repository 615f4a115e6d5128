import { join } from "node:path";
import { PACKAGE_ROOT } from "../../src/paths.js";

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
