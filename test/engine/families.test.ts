import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { promisify } from "node:util";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { LocalEngine } from "../../src/engines/local/index.js";
import { ModelFileError, NoFunctionCallsError } from "../../src/engine/index.js";
import {
  gguf,
  writeGguf,
  GgmlType,
  metaString,
  readGgufHeader,
  dequantize,
  quantizeQ4_0,
  quantizeQ8_0,
} from "../../src/gguf/index.js";
import { ARCHITECTURES } from "../../src/demo/architectures.js";
import { modelFile } from "../../src/demo/model.js";
import { DEMO_DIMS } from "../../src/demo/qwen3.js";
import { buildVocabulary } from "../../src/demo/vocabulary.js";
import { probeModelDetailsInChild } from "../../src/modelProbe/probe.js";
import { FAMILIES } from "../../src/demo/families.js";
import { ensureFamilySet, generateFamilySet, QUANT_NAMES } from "../../src/demo/familySets.js";
import { llamaCppTemplates } from "../../src/demo/llamaCppTemplates.js";
import { SeededRandom } from "../../src/demo/random.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { conversation, quietLogger, TEST_THREADS } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import { MAIN } from "../helpers/server.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";

const sha = (p: string) => createHash("sha256").update(readFileSync(p)).digest("hex");

describe("family demo sets", () => {
  it("are deterministic and carry the byte-identical llama.cpp template and the family's special tokens", () => {
    const a = tempDir(),
      b = tempDir();
    for (const family of ["llama", "gemma4"]) {
      const x = generateFamilySet(a, family, "Q4_0");
      const y = generateFamilySet(b, family, "Q4_0");
      expect(sha(x.model)).toBe(sha(y.model));
      const spec = FAMILIES.find((f) => f.name === family)!;
      const header = readGgufHeader(x.model);
      expect(metaString(header, "general.architecture")).toBe(spec.architecture);
      const template = llamaCppTemplates([spec.template], `${a}/models/.llama-cpp-templates`)[spec.template];
      expect(metaString(header, "tokenizer.chat_template")).toBe(template);
      const tokens = (header.metadata.get("tokenizer.ggml.tokens") as { items: string[] }).items;
      for (const s of spec.specials) expect(tokens).toContain(s.text);
      // weight matrices quantized, norms F32
      expect(header.tensors.find((t) => t.name === "blk.0.attn_q.weight")!.type).toBe(GgmlType.Q4_0);
      expect(header.tensors.find((t) => t.name === "blk.0.attn_norm.weight")!.type).toBe(GgmlType.F32);
    }
  });

  it("weact-mcp demo-weights --family NAME --quant all prints one JSON line per generated set", async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [MAIN, "demo-weights", "--family", "qwen2", "--quant", "all"],
      { env: { ...process.env, WEACT_LOG_LEVEL: "warn" } },
    );
    const sets = stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { family: string; quant: string; model: string; adapters: string });
    expect(sets.map((s) => [s.family, s.quant])).toEqual([
      ["qwen2", "F16"],
      ["qwen2", "Q8_0"],
      ["qwen2", "Q4_0"],
    ]);
    for (const s of sets) {
      expect(readGgufHeader(s.model).tensors.find((t) => t.name === "blk.0.attn_q.weight")!.type).toBe(
        GgmlType[s.quant as "F16"],
      );
      expect(
        (JSON.parse(readFileSync(s.adapters, "utf8")) as { adapters: { alias: string }[] }).adapters.map(
          (a) => a.alias,
        ),
      ).toEqual(["plan", "search", "write"]);
    }
    const bad = await promisify(execFile)(process.execPath, [MAIN, "demo-weights", "--family", "gpt-5"]).catch(
      (e: { code: number; stderr: string }) => e,
    );
    expect(bad).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--family: "gpt-5" is not one of llama, qwen2, .* or all/),
    });
  });

  // node-llama-cpp resolves each family's wrapper from the template and the vocabulary, read in the probe's child
  // process
  it.each(FAMILIES.map((f) => [f.name, f.wrapper, f.functionCalls] as const))(
    "%s resolves node-llama-cpp's %s chat wrapper (own call syntax: %s)",
    async (family, wrapper, functionCalls) => {
      const set = ensureFamilySet(PACKAGE_ROOT, family, "F16");
      const probe = await probeModelDetailsInChild(set.model);
      expect(probe.ok).toBe(true);
      if (!probe.ok) return;
      expect(probe.details.chatWrapper).toBe(wrapper);
      expect(!probe.details.genericCallSyntax).toBe(functionCalls);
    },
  );

  it("a gemma4 file with no sliding-window layer (llama.cpp would abort the process) is refused before it loads", async () => {
    const set = ensureFamilySet(PACKAGE_ROOT, "gemma4", "F16");
    const header = readGgufHeader(set.model);
    const spec = FAMILIES.find((f) => f.name === "gemma4")!;
    const model = modelFile({
      name: "no-swa",
      architecture: ARCHITECTURES.gemma4,
      dims: DEMO_DIMS,
      vocab: buildVocabulary(spec.specials),
      tokenizer: spec.tokenizer,
      chatTemplate: metaString(header, "tokenizer.chat_template")!,
      seed: 1,
      weightType: GgmlType.F16,
    });
    model.metadata["gemma4.attention.sliding_window_pattern"] = gguf.bools(new Array(DEMO_DIMS.nLayer).fill(false));
    const path = `${tempDir()}/no-swa.gguf`;
    writeGguf(path, model.metadata, model.tensors);
    const err = await LocalEngine.load({
      modelPath: path,
      gpu: false,
      threads: TEST_THREADS,
      contextSize: 1024,
      logger: quietLogger(),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelFileError);
    expect((err as Error).message).toMatch(
      /gemma4\.attention\.sliding_window_pattern marks no layer as sliding-window/,
    );
  });

  it("a family whose template has no tool-call syntax is refused at start-up, naming the problem and the fix", async () => {
    const set = ensureFamilySet(PACKAGE_ROOT, "phi3", "F16");
    const err = await LocalEngine.load({
      modelPath: set.model,
      gpu: false,
      threads: TEST_THREADS,
      contextSize: 1024,
      logger: quietLogger(),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoFunctionCallsError);
    expect((err as Error).message).toMatch(
      /no tool-call syntax.*load_lora.*JinjaTemplate.*tool-calling \(Instruct\) variant.*weact-mcp doctor/,
    );
  });
});

describe("Q8_0 and Q4_0 blocks (ggml's reference quantizers)", () => {
  const rng = new SeededRandom(7);
  const values = Float32Array.from({ length: 4096 }, () => rng.normal());

  it("lay out 34- and 18-byte blocks of 32 values and round-trip within a quantization step", () => {
    // Q8_0 rounds to the nearest of +-127 steps; Q4_0's 16 levels run from -8d to 7d, so the end opposite the
    // largest magnitude is clamped one full step short
    for (const [type, bytes, quant, steps, within] of [
      [GgmlType.Q8_0, 34, quantizeQ8_0, 127, 0.5],
      [GgmlType.Q4_0, 18, quantizeQ4_0, 8, 1],
    ] as const) {
      const q = quant(values);
      expect(q.byteLength).toBe((values.length / 32) * bytes);
      const back = dequantize(q, type);
      for (let b = 0; b < values.length / 32; b++) {
        const block = values.subarray(b * 32, b * 32 + 32);
        const amax = Math.max(...Array.from(block, Math.abs));
        const step = amax / steps;
        for (let j = 0; j < 32; j++)
          expect(Math.abs(back[b * 32 + j]! - block[j]!)).toBeLessThanOrEqual(step * within + amax * 2e-3);
      }
    }
    // Q4_0: the value of largest magnitude maps to nibble 0 exactly (d = max / -8)
    const one = new Float32Array(32).fill(0.25);
    one[5] = -2;
    const q = quantizeQ4_0(one);
    expect(q[2 + 5]! & 0x0f).toBe(0);
    expect(dequantize(q, GgmlType.Q4_0)[5]).toBeCloseTo(-2, 6);
  });

  it("llama.cpp reads the quantized bases: next-token log-probs drift from F16 by a measured amount (reported, not bounded)", async () => {
    const drift: Record<string, number> = {};
    for (const family of ["qwen3", "llama"]) {
      const probs: Map<number, number>[] = [];
      for (const quant of QUANT_NAMES) {
        const set = ensureFamilySet(PACKAGE_ROOT, family, quant);
        const engine = await LocalEngine.load({
          modelPath: set.model,
          gpu: false,
          threads: TEST_THREADS,
          contextSize: 8192,
          sequencesPerContext: 1,
          logger: quietLogger(),
        });
        try {
          probs.push(
            await referenceNextTokenLogProbs(
              engine,
              null,
              engine.renderTokens(conversation("Which river flows through Paris?")),
            ),
          );
        } finally {
          await engine.dispose();
        }
      }
      QUANT_NAMES.slice(1).forEach((quant, i) => {
        let max = 0;
        // over the tokens F16 finds likely: the tail of a random model's distribution is noise
        for (const [token, lp] of probs[0]!)
          if (lp > -10) max = Math.max(max, Math.abs(lp - probs[i + 1]!.get(token)!));
        drift[`${family} ${quant}`] = max;
      });
    }
    console.log("max |log-prob(F16) - log-prob(quant)| over tokens with F16 log-prob > -10:", JSON.stringify(drift));
    for (const [cell, d] of Object.entries(drift)) {
      expect(d, cell).toBeGreaterThan(0); // the quantized file really differs
      expect(Number.isFinite(d), cell).toBe(true);
    }
    // Q8_0 keeps 8 bits, Q4_0 4: its drift is larger on the same weights
    expect(drift["qwen3 Q8_0"]!).toBeLessThan(drift["qwen3 Q4_0"]!);
  });
});
