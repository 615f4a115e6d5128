import { BaseSequencer, type TestSpecification } from "vitest/node";
import { defineConfig } from "vitest/config";

/**
 * Vitest runs files it has no timings for (a fresh clone, CI) largest first. The family matrix is a small file that
 * runs for minutes (every tool-calling family, three quant types each): started first, it runs beside the other
 * files instead of alone at the end.
 */
class MatrixFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const isMatrix = (f: TestSpecification) => f.moduleId.endsWith("/test/engine/family-matrix.test.ts");
    return [...sorted.filter(isMatrix), ...sorted.filter((f) => !isMatrix(f))];
  }
}

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/globalSetup.ts"],
    // node-llama-cpp's native addon belongs in its own process, not a worker thread
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    sequence: { sequencer: MatrixFirst },
  },
});
