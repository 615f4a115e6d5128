import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readGgufHeader } from "../../src/gguf/index.js";
import {
  exportPeft,
  importPeft,
  parsePeftConfig,
  PEFT_ARCHITECTURES,
  readGgufTensorData,
  SafetensorsFile,
} from "../../src/library/peft/index.js";
import { demo } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import { bytes, familyBase, peftFactors, RANK, writePeftFolder } from "../helpers/peftFamilies.js";

/**
 * GGUF -> PEFT (what vLLM and SGLang load) is the inverse of import-peft: a PEFT folder imported and exported again
 * gives back its very factors, the llama family's q/k rows un-permuted included; a scale is baked into lora_alpha.
 */
describe("PEFT export", () => {
  it.each(["llama", "qwen3"])("%s: import then export gives back the PEFT factors byte for byte", async (name) => {
    const dir = tempDir();
    const { arch, path } = familyBase(name, dir);
    const factors = peftFactors(5);
    const peft = writePeftFolder(join(dir, "peft"), factors);
    const imported = await importPeft({
      dir: peft,
      base: readGgufHeader(path),
      alias: "a",
      outFile: join(dir, "a.gguf"),
    });
    const out = join(dir, "exported");
    const result = await exportPeft({
      adapter: readGgufHeader(imported.outFile),
      base: readGgufHeader(path),
      outDir: out,
      scale: 1,
    });
    expect(result).toMatchObject({ rank: RANK, alpha: RANK, targetModules: ["k_proj", "q_proj", "v_proj"] });
    const st = SafetensorsFile.open(join(out, "adapter_model.safetensors"));
    try {
      factors.forEach((layer, l) =>
        layer.forEach((f) => {
          const prefix = `base_model.model.model.layers.${l}.self_attn.${f.module}`;
          expect(st.read(st.tensor(`${prefix}.lora_A.weight`)!).equals(Buffer.from(bytes(f.a))), `${prefix} A`).toBe(
            true,
          );
          expect(st.read(st.tensor(`${prefix}.lora_B.weight`)!).equals(Buffer.from(bytes(f.b))), `${prefix} B`).toBe(
            true,
          );
          expect(st.tensor(`${prefix}.lora_B.weight`)!.shape).toEqual([f.out, RANK]);
        }),
      );
    } finally {
      st.close();
    }
    // the permutation is really undone: in the GGUF, q's lora_b rows are in llama.cpp's order, not the PEFT one
    const q = readGgufTensorData(readGgufHeader(imported.outFile), "blk.0.attn_q.weight.lora_b").equals(
      Buffer.from(bytes(factors[0]![0]!.b)),
    );
    expect(q).toBe(!PEFT_ARCHITECTURES[arch.name]!.permuteQK);
  });

  it("bakes a scale into lora_alpha and keeps the weights; the config passes the importer's own checks", async () => {
    const full = join(tempDir(), "full");
    const half = join(tempDir(), "half");
    const adapter = readGgufHeader(demo.adapters.search!);
    const base = readGgufHeader(demo.model);
    await exportPeft({ adapter, base, outDir: full, scale: 1, baseModel: "Qwen/Qwen3-0.6B" });
    const r = await exportPeft({ adapter, base, outDir: half, scale: 0.5 });
    const config = (dir: string) =>
      parsePeftConfig(JSON.parse(readFileSync(join(dir, "adapter_config.json"), "utf8")), dir);
    expect(config(half).lora_alpha).toBeCloseTo(config(full).lora_alpha / 2, 6);
    expect(r.alpha).toBeCloseTo(config(full).lora_alpha / 2, 6);
    expect(config(full)).toMatchObject({ peft_type: "LORA", r: 8, base_model_name_or_path: "Qwen/Qwen3-0.6B" });
    expect(
      readFileSync(join(half, "adapter_model.safetensors")).equals(
        readFileSync(join(full, "adapter_model.safetensors")),
      ),
    ).toBe(true);
  });
});
