import { defineConfig } from "vitest/config";
import base from "./vitest.config.js";

/**
 * `npm run check:vllm`: the remote backend on a real vLLM (test/vllm), one file at a time beside nothing else, so the
 * engine has the machine's cores.
 */
export default defineConfig({
  ...base,
  test: { ...base.test, include: ["test/vllm/**/*.test.ts"], exclude: ["**/node_modules/**"], maxWorkers: 1 },
});
