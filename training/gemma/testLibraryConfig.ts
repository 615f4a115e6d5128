import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfigFile, type ResolvedConfig } from "../../src/config/loadConfig.js";
import { saveManifest, type LibraryEntry } from "../../src/library/manifest.js";
import type { ChatTemplateSetting } from "../../src/llamaCpp/loadModel.js";
import { testAdapterDir } from "../../testkit/realModelAdapters.js";
import { GEMMA_DIR } from "./library.js";

/**
 * The Gemma library's config (harness limits and all) serving `model` with a library of its test LoRAs (`entries`,
 * their files in testAdapterDir(model)), written to a manifest in a fresh folder that also takes the traces: what the
 * appetite checks run a backbone on, so that what they count is the backbone's decisions, not its adapters' answers.
 */
export function testLibraryConfig(
  model: string,
  entries: readonly LibraryEntry[],
  opts: { threads: number; chatTemplate: ChatTemplateSetting; prefix: string },
): ResolvedConfig {
  const base = loadConfigFile(join(GEMMA_DIR, "config.json"));
  const traceDir = mkdtempSync(join(tmpdir(), opts.prefix));
  const manifestPath = join(traceDir, "manifest.json");
  saveManifest(manifestPath, entries);
  return {
    ...base,
    model: { ...base.model, path: model, gpu: false, threads: opts.threads, chatTemplate: opts.chatTemplate },
    adapters: { ...base.adapters, manifest: manifestPath, allowedDirs: [testAdapterDir(model)] },
    manifestPath,
    harness: { ...base.harness, traceDir },
  };
}
