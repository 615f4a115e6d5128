import { execa } from "execa";
import { join, dirname } from "node:path";
import type { Logger } from "../../log.js";
import { sha256File } from "../../gguf/index.js";
import { PACKAGE_ROOT } from "../../paths.js";
import type { ModelSpec } from "../types.js";
import type { ModelSource } from "./types.js";

/** How a made model's base is fetched (fetchModel itself, given here so the sources import no fetcher). */
export type FetchBase = (name: string, dir: string, logger: Logger) => Promise<string>;

/** The llama.cpp tools a merge runs, built once per machine from the source node-llama-cpp ships. */
const TOOLS = ["llama-export-lora", "llama-quantize"];

/**
 * A model this package makes rather than downloads: a LoRA it ships merged into a fetched base by llama.cpp's
 * `llama-export-lora` (which writes the merged tensors in F16), then requantized by `llama-quantize` where the spec
 * says so. Both tools are built by scripts/llama-cpp-build.sh (git, cmake and g++; minutes, once per machine), and
 * run on one thread: the merged bytes are then the same on every machine, and the spec's SHA-256 pins them.
 */
export function mergeSource(fetchBase: FetchBase): ModelSource {
  return {
    describe: (spec) =>
      `a merge of ${spec.merge?.lora ?? "?"} into ${spec.merge?.base ?? "?"} (llama-export-lora${spec.merge?.quantize ? `, then llama-quantize ${spec.merge.quantize}` : ""})`,
    offers: (spec) => spec.merge !== undefined,
    async fetch(spec: ModelSpec, workDir: string, logger: Logger) {
      const merge = spec.merge!;
      const lora = join(PACKAGE_ROOT, merge.lora);
      const loraSha256 = await sha256File(lora).catch(() => undefined);
      if (loraSha256 !== merge.loraSha256)
        throw new Error(`${lora}: SHA-256 ${loraSha256 ?? "(missing)"}, expected ${merge.loraSha256}`);
      const base = await fetchBase(merge.base, dirname(workDir), logger);
      logger.info({ tools: TOOLS }, "building llama.cpp's merge tools (once per machine)");
      const built = await execa("bash", [join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), ...TOOLS], {
        stdin: "ignore",
        stderr: "inherit",
      });
      const bin = built.stdout.trim().split("\n").at(-1)!;
      const merged = join(workDir, merge.quantize ? "merged-f16.gguf" : spec.fileName);
      logger.info({ base, lora }, `merging the LoRA into ${merge.base}`);
      await execa(join(bin, "llama-export-lora"), ["-m", base, "--lora", lora, "-o", merged, "-t", "1"], {
        stdin: "ignore",
      });
      if (!merge.quantize) return { file: merged };
      const out = join(workDir, spec.fileName);
      await execa(join(bin, "llama-quantize"), ["--allow-requantize", merged, out, merge.quantize, "1"], {
        stdin: "ignore",
      });
      return { file: out };
    },
  };
}
