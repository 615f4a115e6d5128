import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { WrapperFacts } from "./callSyntax.js";

let probeScript: string | undefined;

/** The probe as a file: node-llama-cpp re-runs its own process arguments to test its binary, which `-e` breaks. */
function script(): string {
  if (probeScript) return probeScript;
  const llamaUrl = import.meta.resolve("node-llama-cpp");
  probeScript = join(mkdtempSync(join(tmpdir(), "weact-probe-")), "probe.mjs");
  writeFileSync(
    probeScript,
    `const { getLlama, getLlamaGpuTypes, JinjaTemplateChatWrapper, LlamaLogLevel, resolveChatWrapper } = await import(${JSON.stringify(llamaUrl)});
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, progressLogs: false, logLevel: LlamaLogLevel.error, logger: (_l, m) => process.stderr.write(m) });
try {
  const model = await llama.loadModel({ modelPath: process.argv[2], vocabOnly: true });
  if (process.argv[3] === "details") {
    // the facts of callSyntax.ts wrapperFacts (the child cannot import this project's TypeScript)
    const wrapper = resolveChatWrapper(model);
    const genericCallSyntax = wrapper instanceof JinjaTemplateChatWrapper && !wrapper.usingJinjaFunctionCallTemplate;
    const gpuTypes = (await getLlamaGpuTypes("supported")).filter(Boolean);
    process.stdout.write(JSON.stringify({ chatWrapper: wrapper.wrapperName, callPrefix: String(wrapper.settings.functions.call.prefix), genericCallSyntax, gpuTypes }) + "\\n");
  }
  await model.dispose();
} catch (err) {
  process.stderr.write("\\nPROBE_ERROR " + String(err?.message ?? err).split("\\n")[0] + "\\n");
  process.exit(2);
}
await llama.dispose();
`,
  );
  return probeScript;
}

/**
 * Loads a model's metadata and vocabulary (llama.cpp's hyperparameter parsing included) in a throwaway
 * child process. llama.cpp aborts the whole process on some malformed files; if it does, only the child
 * dies and the caller gets the reason instead.
 */
export async function probeModelInChild(
  modelPath: string,
  timeoutMs = 60_000,
): Promise<{ ok: true } | { ok: false; reason: string }> {
  return runProbe(modelPath, false, timeoutMs);
}

/** What node-llama-cpp makes of a model, read in the child: its chat wrapper and call syntax, GPU types. */
export interface ModelProbeDetails extends WrapperFacts {
  /** GPU backends this machine's node-llama-cpp binaries support (empty: CPU only). */
  gpuTypes: string[];
}

/** The probe, also reporting `ModelProbeDetails` (for `weact-mcp doctor`). */
export async function probeModelDetailsInChild(
  modelPath: string,
  timeoutMs = 60_000,
): Promise<{ ok: true; details: ModelProbeDetails } | { ok: false; reason: string }> {
  return runProbe(modelPath, true, timeoutMs) as Promise<
    { ok: true; details: ModelProbeDetails } | { ok: false; reason: string }
  >;
}

function runProbe(
  modelPath: string,
  details: boolean,
  timeoutMs: number,
): Promise<{ ok: true; details?: ModelProbeDetails } | { ok: false; reason: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [script(), modelPath, ...(details ? ["details"] : [])], {
      stdio: ["ignore", details ? "pipe" : "ignore", "pipe"],
    });
    let stderr = "";
    let stdout = "";
    child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0)
        return resolve(
          details
            ? { ok: true, details: JSON.parse(stdout.trim().split("\n").at(-1)!) as ModelProbeDetails }
            : { ok: true },
        );
      const lines = stderr.trim().split("\n").filter(Boolean);
      const error = lines.find((l) => l.startsWith("PROBE_ERROR "))?.slice("PROBE_ERROR ".length);
      const detail = error ?? lines.slice(-2).join(" | ");
      resolve({
        ok: false,
        reason: signal
          ? `llama.cpp aborted while reading it (${signal})${detail ? `: ${detail}` : ""}`
          : `llama.cpp refused it${detail ? `: ${detail}` : ""}`,
      });
    });
  });
}
