import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { DEMO_SEED, demoWeightPaths, generateDemoWeights } from "../../src/demo/demoWeights.js";
import { readGgufHeader, metaString } from "../../src/gguf/index.js";
import { tempDir } from "../helpers/files.js";

const digest = (paths: string[]) => paths.map((p) => createHash("sha256").update(readFileSync(p)).digest("hex"));
const files = (root: string) => {
  const p = demoWeightPaths(root);
  return [p.model, ...Object.values(p.adapters)];
};

describe("generated demo weights", () => {
  it("are byte-identical for the same seed and differ for another seed", () => {
    const a = tempDir(),
      b = tempDir(),
      c = tempDir();
    generateDemoWeights(a, { seed: DEMO_SEED });
    generateDemoWeights(b, { seed: DEMO_SEED });
    generateDemoWeights(c, { seed: DEMO_SEED + 1 });
    expect(digest(files(a))).toEqual(digest(files(b)));
    const differing = digest(files(a)).filter((h, i) => h !== digest(files(c))[i]);
    expect(differing).toHaveLength(files(a).length);
  });

  it("are a tiny qwen3 model with the Qwen chat tokens, and LoRAs of several ranks over attention and MLP", () => {
    const root = tempDir();
    const paths = generateDemoWeights(root);
    const total = files(root).reduce((n, p) => n + statSync(p).size, 0);
    expect(total).toBeLessThan(8 * 1024 * 1024);
    const model = readGgufHeader(paths.model);
    expect(metaString(model, "general.architecture")).toBe("qwen3");
    const tokens = model.metadata.get("tokenizer.ggml.tokens") as { items: string[] };
    for (const special of [
      "<|im_start|>",
      "<|im_end|>",
      "<|endoftext|>",
      "<tool_call>",
      "</tool_call>",
      "<think>",
      "</think>",
      "<tool_response>",
      "</tool_response>",
    ]) {
      expect(tokens.items).toContain(special);
    }
    expect(metaString(model, "tokenizer.chat_template")).toContain("<tool_call>");
    const ranks = Object.fromEntries(
      Object.entries(paths.adapters).map(([alias, p]) => {
        const lora = readGgufHeader(p);
        const names = lora.tensors.map((t) => t.name);
        for (const target of ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]) {
          expect(names).toContain(`blk.0.${target}.weight.lora_a`);
        }
        expect(metaString(lora, "general.type")).toBe("adapter");
        return [alias, lora.tensors[0]!.shape[1]];
      }),
    );
    expect(ranks).toEqual({ plan: 4, search: 8, write: 4, code: 4, "write-v2": 4, verify: 4 });
  });
});
