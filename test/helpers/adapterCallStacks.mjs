// Preloaded into a spawned server (NODE_OPTIONS=--import): records the JavaScript stack at every call of
// node-llama-cpp's LlamaContext._setLoras, llama.cpp's adapter call, one JSON line each in WEACT_ADAPTER_STACKS.
// Test tooling only: the server itself never patches anything here.
// Only the server's own process: its children (the model probe, node-llama-cpp's binary tests) are left alone.
import { appendFileSync } from "node:fs";

const out = process.env.WEACT_ADAPTER_STACKS;
if (out && process.argv[1]?.endsWith("/dist/src/cli/main.js")) {
  const { LlamaContext } = await import("node-llama-cpp");
  Error.stackTraceLimit = 200;
  const setLoras = LlamaContext.prototype._setLoras;
  LlamaContext.prototype._setLoras = function (...args) {
    appendFileSync(out, JSON.stringify({ stack: new Error("_setLoras").stack }) + "\n");
    return setLoras.apply(this, args);
  };
}
