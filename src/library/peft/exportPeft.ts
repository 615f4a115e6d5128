import { createWriteStream } from "node:fs";
import { mkdir, open, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { dequantize, GgmlType, metaNumber, metaString, bytesOf, type GgufFile } from "../../gguf/index.js";
import { PeftImportError } from "./errors.js";
import { readGgufTensorDataFrom } from "./ggufData.js";
import { PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE } from "./importPeft.js";
import { ggufToPeftName, permuteRowsForRope, PEFT_ARCHITECTURES } from "./mapping.js";
import { openRegularFile, readPeftFolderConfig } from "./peftFolder.js";
import { safetensorsBytes, type SafetensorsTensorSource } from "./safetensors.js";

export interface ExportPeftOptions {
  /** The GGUF LoRA's header (readGgufHeader). */
  adapter: GgufFile;
  /** The base model's header: architecture and head counts (the q/k permutation). */
  base: GgufFile;
  /** A new, empty folder for adapter_config.json and adapter_model.safetensors. */
  outDir: string;
  /**
   * Baked into lora_alpha (PEFT's scaling is alpha / r): engines that take no per-request scale get the same weights.
   */
  scale: number;
  /** base_model_name_or_path, as the engine names the base. */
  baseModel?: string;
}

export interface ExportPeftResult {
  rank: number;
  /** lora_alpha as written (the GGUF's alpha times the scale). */
  alpha: number;
  targetModules: string[];
}

const SAFETENSORS_DTYPE: Partial<Record<GgmlType, string>> = {
  [GgmlType.F32]: "F32",
  [GgmlType.F16]: "F16",
  [GgmlType.BF16]: "BF16",
};

/**
 * A GGUF LoRA as a PEFT folder (the inverse of importPeft), for serving engines that load PEFT (vLLM, SGLang):
 * tensor names mapped back to the HF modules, lora_B rows of q/k un-permuted for the llama-family architectures
 * whose conversion permutes them, the bytes otherwise as they are (ggml ne [in, r] is torch [r, in]); quantized
 * factors (Q8_0, Q4_0) are dequantized to F32. lora_alpha carries the scale. Reads and writes off the event loop
 * (a server exports while it serves).
 */
export async function exportPeft(opts: ExportPeftOptions): Promise<ExportPeftResult> {
  const { adapter, base } = opts;
  const architecture = metaString(base, "general.architecture") ?? "";
  const family = PEFT_ARCHITECTURES[architecture];
  if (!family)
    throw new PeftImportError(
      base.path,
      "general.architecture",
      `is "${architecture}"; PEFT export knows ${Object.keys(PEFT_ARCHITECTURES).join(", ")}`,
    );
  const nHead = metaNumber(base, `${architecture}.attention.head_count`);
  const nHeadKv = metaNumber(base, `${architecture}.attention.head_count_kv`) ?? nHead;
  const tensors: SafetensorsTensorSource[] = [];
  const modules = new Set<string>();
  let rank = 0;
  const source = await open(adapter.path, "r");
  try {
    for (const t of adapter.tensors) {
      const mapped = ggufToPeftName(t.name);
      if (!mapped)
        throw new PeftImportError(
          adapter.path,
          t.name,
          "maps to no PEFT module (known: the attention and MLP projections of llama, qwen2, qwen3 and granite, and lm_head)",
        );
      modules.add(mapped.module);
      let data: Uint8Array;
      let dtype = SAFETENSORS_DTYPE[t.type as GgmlType];
      if (dtype) data = await readGgufTensorDataFrom(source, adapter, t);
      else if (t.type === GgmlType.Q8_0 || t.type === GgmlType.Q4_0) {
        data = bytesOf(dequantize(await readGgufTensorDataFrom(source, adapter, t), t.type));
        dtype = "F32";
      } else
        throw new PeftImportError(
          adapter.path,
          t.name,
          `has ggml type ${t.type}; PEFT export takes F32, F16, BF16, Q8_0 and Q4_0`,
        );
      const [ne0, ne1] = t.shape as [number, number];
      const isB = t.name.endsWith(".lora_b");
      if (!isB) rank = Math.max(rank, ne1);
      const heads =
        !family.permuteQK || !isB
          ? undefined
          : mapped.module === "q_proj"
            ? nHead
            : mapped.module === "k_proj"
              ? nHeadKv
              : undefined;
      if (heads !== undefined) data = permuteRowsForRope(data, ne1, heads, true);
      tensors.push({ name: mapped.peft, dtype, shape: [ne1, ne0], data });
    }
  } finally {
    await source.close();
  }
  const alpha = (metaNumber(adapter, "adapter.lora.alpha") ?? rank) * opts.scale;
  const targetModules = [...modules].sort();
  await mkdir(opts.outDir, { recursive: true });
  await writeFile(join(opts.outDir, PEFT_WEIGHTS_FILE), safetensorsBytes(tensors));
  await writeFile(
    join(opts.outDir, PEFT_CONFIG_FILE),
    JSON.stringify(
      {
        peft_type: "LORA",
        task_type: "CAUSAL_LM",
        base_model_name_or_path: opts.baseModel ?? metaString(base, "general.name") ?? null,
        r: rank,
        lora_alpha: alpha,
        lora_dropout: 0,
        target_modules: targetModules,
        bias: "none",
        fan_in_fan_out: false,
        use_rslora: false,
        use_dora: false,
        modules_to_save: null,
        inference_mode: true,
      },
      null,
      2,
    ) + "\n",
  );
  return { rank, alpha, targetModules };
}

/**
 * A PEFT folder the manifest names, copied with the scale baked into lora_alpha (the weights unchanged): its config
 * is checked by the importer's own rules first (a DoRA or rank-pattern adapter is refused with the field named),
 * and only regular files are read (openRegularFile: no link out of the adapter folders, no FIFO).
 */
export async function scaledPeftCopy(srcDir: string, outDir: string, scale: number): Promise<ExportPeftResult> {
  const { config, raw } = await readPeftFolderConfig(srcDir);
  const weights = await openRegularFile(join(srcDir, PEFT_WEIGHTS_FILE));
  try {
    await mkdir(outDir, { recursive: true });
    await pipeline(
      weights.createReadStream({ autoClose: false }),
      createWriteStream(join(outDir, PEFT_WEIGHTS_FILE), { flags: "wx" }),
    );
  } finally {
    await weights.close();
  }
  await writeFile(
    join(outDir, PEFT_CONFIG_FILE),
    JSON.stringify({ ...raw, lora_alpha: config.lora_alpha * scale }, null, 2) + "\n",
  );
  const modules = typeof config.target_modules === "string" ? [config.target_modules] : config.target_modules;
  return { rank: config.r, alpha: config.lora_alpha * scale, targetModules: [...modules].sort() };
}
