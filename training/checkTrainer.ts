import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ensureDemoWeights } from "../src/demo/ensure.js";
import { createLogger } from "../src/log.js";
import { SeededRandom } from "../src/demo/random.js";
import { trainerBinary } from "./pipeline/trainer.js";

/**
 * `npm run check:trainer`: whether training/trainer (weact-train) learns what the demo library needs most, reading
 * its evidence: in-context copying. It trains the random demo model on windows of random tokens followed by the
 * same tokens (loss on the repeat only), then scores windows it never saw. A trainer whose gradients or update are
 * wrong memorises at best; one that works copies fresh windows. Builds the trainer through the cached llama.cpp
 * build first (seconds, once the static ggml exists). Prints one JSON line; exits 1 below 95% held-out accuracy.
 */
const { values } = parseArgs({
  options: {
    windows: { type: "string", default: "4000" },
    steps: { type: "string", default: "400" },
    threads: { type: "string", default: "2" },
  },
});
const HALF = 32;
const dir = mkdtempSync(join(tmpdir(), "weact-trainer-check-"));
const rng = new SeededRandom(7);

/**
 * A samples file of weact-train (WTS1: count, then per sample n, tokens[n], mask[n]) of copy windows over `alphabet`.
 */
function copyWindows(path: string, count: number, alphabet: readonly number[]): void {
  const n = 2 * HALF;
  const out = Buffer.alloc(8 + count * (4 + 5 * n));
  out.write("WTS1", 0, "ascii");
  out.writeUInt32LE(count, 4);
  let at = 8;
  for (let w = 0; w < count; w++) {
    const first = Array.from({ length: HALF }, () => alphabet[Math.floor(rng.next() * alphabet.length)]!);
    out.writeUInt32LE(n, at);
    at += 4;
    for (const t of [...first, ...first]) at = out.writeUInt32LE(t, at);
    for (let i = 0; i < n; i++) out[at++] = i >= HALF ? 1 : 0;
  }
  writeFileSync(path, out);
}

const demo = ensureDemoWeights(createLogger("warn"));
const trainer = trainerBinary();
// plain tokens of the demo vocabulary (its specials sit at the end)
const alphabet = Array.from({ length: 210 }, (_, i) => 40 + i);
copyWindows(join(dir, "train.bin"), Number(values.windows), alphabet);
copyWindows(join(dir, "held.bin"), 100, alphabet);
const started = Date.now();
const args = [
  "--data",
  join(dir, "train.bin"),
  "--out",
  join(dir, "copy.gguf"),
  "--batch",
  "8",
  "--epochs",
  "1000",
  "--max-steps",
  values.steps!,
  "--lr",
  "3e-3",
  "--warmup",
  "20",
  "--threads",
  values.threads!,
];
execFileSync(trainer, ["--model", demo.model, ...args], { stdio: ["ignore", "ignore", "inherit"] });
const trainSeconds = (Date.now() - started) / 1000;
const evaluate = (model: string) =>
  JSON.parse(
    execFileSync(trainer, ["--model", model, "--eval", join(dir, "held.bin")], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    })
      .trim()
      .split("\n")
      .at(-1)!,
  ) as { loss: number; accuracy: number };
const before = evaluate(demo.model);
const after = evaluate(join(dir, "copy.gguf"));
const line = {
  steps: Number(values.steps),
  trainSeconds,
  uniformLoss: Math.log(alphabet.length),
  heldOut: { before, after },
};
process.stdout.write(JSON.stringify(line) + "\n");
if (after.accuracy < 0.95) process.exit(1);
