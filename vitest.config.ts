import { BaseSequencer, type TestSpecification } from "vitest/node";
import { defineConfig } from "vitest/config";

/**
 * Vitest runs files it has no timings for (a fresh clone, CI) largest first. The family matrix and the Gemma 3 270M
 * engine suite are small files that run for minutes (every tool-calling family, three quant types each; a real model
 * on one thread): started first, they run beside the other files instead of alone at the end.
 */
const LONG_FIRST = ["/test/engine/family-matrix.test.ts", "/test/engine/gemma-swa.test.ts"];
class LongFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const isLong = (f: TestSpecification) => LONG_FIRST.some((name) => f.moduleId.endsWith(name));
    return [...sorted.filter(isLong), ...sorted.filter((f) => !isLong(f))];
  }
}

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // the real vLLM's suite runs as npm run check:vllm (vitest.vllm.config.ts), Qwen's as check:qwen
    exclude: ["test/vllm/**", "test/qwen/**", "**/node_modules/**"],
    globalSetup: ["test/globalSetup.ts"],
    // node-llama-cpp's native addon belongs in its own process, not a worker thread
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    sequence: { sequencer: LongFirst },
  },
});
