import { defineConfig } from "vitest/config";

/**
 * The fast, pure tests of the core logic (no llama.cpp, no spawned server) that `npm run check:mutation` runs
 * under Stryker: each mutant is tested in seconds, so the whole run takes minutes on two shared cores.
 */
export default defineConfig({
  test: {
    include: ["test/unit/**/*.test.ts"],
    pool: "forks",
    maxWorkers: 1,
    testTimeout: 30_000,
  },
});
