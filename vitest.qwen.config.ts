import { defineConfig } from "vitest/config";
import base from "./vitest.config.js";

/**
 * `npm run check:qwen`: the engine conformance suite's switch checks on Qwen2.5-Coder-0.5B-Instruct (test/qwen), both
 * cache strategies, alone on the machine: a 0.5B model on CPU takes minutes per strategy, more than `npm test` affords.
 */
export default defineConfig({
  ...base,
  test: { ...base.test, include: ["test/qwen/**/*.test.ts"], exclude: ["**/node_modules/**"], maxWorkers: 1 },
});
