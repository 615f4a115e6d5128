import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { SpeedFigures } from "./llamaSpeed.js";
import { fmt, median } from "./stats.js";

/** The bindings compared, each in processes of its own: node-llama-cpp's prebuilt one and the source build. */
export const BINDINGS = ["prebuilt", "source"] as const;
type Binding = (typeof BINDINGS)[number];

type Figure = "prefill1TokPerS" | "prefillBatchTokPerS" | "decode1TokPerS" | "decodeBatchTokPerS";

async function speedInChild(binding: Binding, modelPath: string, threads: number): Promise<SpeedFigures> {
  const child = fileURLToPath(new URL("./bindingSpeed.js", import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [child, binding, modelPath, String(threads)], {
    maxBuffer: 1 << 20,
    env: process.env,
  });
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as SpeedFigures;
}

/**
 * `--scenario binding`: prefill and decode tokens per second (one sequence, and a batch of sequences) of each model
 * with the prebuilt binding and with the source build, side by side: `rounds` rounds alternating the two bindings,
 * each a fresh process measuring every figure (median of 3 after a warm-up); the medians over the rounds, and
 * source / prebuilt.
 */
export async function bindingComparison(
  models: readonly { label: string; path: string }[],
  threads: number,
  rounds: number,
): Promise<{ rows: Record<string, string | number>[]; ratios: Record<string, string>[] }> {
  const rows: Record<string, string | number>[] = [];
  const ratios: Record<string, string>[] = [];
  for (const model of models) {
    const runs: Record<Binding, SpeedFigures[]> = { prebuilt: [], source: [] };
    for (let r = 0; r < rounds; r++)
      for (const binding of BINDINGS) {
        const figures = await speedInChild(binding, model.path, threads);
        runs[binding].push(figures);
        process.stderr.write(`binding bench: ${model.label}, round ${r + 1}: ${JSON.stringify(figures)}\n`);
      }
    const med = (b: Binding, k: Figure) => median(runs[b].map((f) => f[k]));
    const first = runs.prebuilt[0]!;
    for (const binding of BINDINGS) {
      const loaded = runs[binding].map((f) => f.binding);
      if (loaded.some((b) => b !== binding))
        throw new Error(`asked for the ${binding} binding, loaded ${loaded.join(", ")}`);
      rows.push({
        model: model.label,
        binding,
        threads,
        [`prefill1 (${first.prefillTokens} tok) tok/s`]: fmt(med(binding, "prefill1TokPerS"), 1),
        [`prefill x${first.batch} tok/s`]: fmt(med(binding, "prefillBatchTokPerS"), 1),
        [`decode1 (${first.decodeTokens} tok) tok/s`]: fmt(med(binding, "decode1TokPerS"), 1),
        [`decode x${first.batch} tok/s`]: fmt(med(binding, "decodeBatchTokPerS"), 1),
      });
    }
    ratios.push({
      model: model.label,
      "source/prebuilt prefill1": fmt(med("source", "prefill1TokPerS") / med("prebuilt", "prefill1TokPerS")),
      [`prefill x${first.batch}`]: fmt(med("source", "prefillBatchTokPerS") / med("prebuilt", "prefillBatchTokPerS")),
      decode1: fmt(med("source", "decode1TokPerS") / med("prebuilt", "decode1TokPerS")),
      [`decode x${first.batch}`]: fmt(med("source", "decodeBatchTokPerS") / med("prebuilt", "decodeBatchTokPerS")),
    });
  }
  return { rows, ratios };
}
