import { join } from "node:path";
import { PACKAGE_ROOT } from "../src/paths.js";
import { PROGRESS_EVERY_MS, runWithProgress } from "./buildProgress.js";

/**
 * The folder of node-llama-cpp's source-built binding (scripts/node-llama-cpp-build.sh, what model.binding "source"
 * loads), building it first when this machine has none (about 9 minutes on 2 cores, once), with a progress line on
 * stderr every 30 s while it builds.
 */
export async function sourceBinding(): Promise<string> {
  const stdout = await runWithProgress("bash", [join(PACKAGE_ROOT, "scripts", "node-llama-cpp-build.sh")], {
    label: "node-llama-cpp binding build",
    intro: `building node-llama-cpp's binding from its llama.cpp for this CPU with OpenMP, once per machine: about 9 minutes on 2 cores (later runs reuse it from ~/.cache/weact-mcp/node-llama-cpp); a progress line every ${PROGRESS_EVERY_MS / 1000} s`,
    timeoutMs: 60 * 60_000,
  });
  return stdout.trim().split("\n").at(-1)!;
}
