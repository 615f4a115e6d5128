import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

let probeScript: string | undefined;

/** The probe as a file: node-llama-cpp re-runs its own process arguments to test its binary, which `-e` breaks. */
function script(): string {
  if (probeScript) return probeScript;
  const llamaUrl = import.meta.resolve("node-llama-cpp");
  probeScript = join(mkdtempSync(join(tmpdir(), "weact-probe-")), "probe.mjs");
  writeFileSync(
    probeScript,
    `const { getLlama, LlamaLogLevel } = await import(${JSON.stringify(llamaUrl)});
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, progressLogs: false, logLevel: LlamaLogLevel.error, logger: (_l, m) => process.stderr.write(m) });
try {
  const model = await llama.loadModel({ modelPath: process.argv[2], vocabOnly: true });
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
export async function probeModelInChild(modelPath: string, timeoutMs = 60_000): Promise<{ ok: true } | { ok: false; reason: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [script(), modelPath], { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve({ ok: true });
      const lines = stderr.trim().split("\n").filter(Boolean);
      const error = lines.find((l) => l.startsWith("PROBE_ERROR "))?.slice("PROBE_ERROR ".length);
      const detail = error ?? lines.slice(-2).join(" | ");
      resolve({ ok: false, reason: signal ? `llama.cpp aborted while reading it (${signal})${detail ? `: ${detail}` : ""}` : `llama.cpp refused it${detail ? `: ${detail}` : ""}` });
    });
  });
}
