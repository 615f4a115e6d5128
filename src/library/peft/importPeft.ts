import { existsSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import {
  ALORA_INVOCATION_KEY,
  sha256File,
  GgmlType,
  type GgufTensorInfo,
  metaNumber,
  metaString,
  readGgufHeader,
  type GgufFile,
  loraProblems,
  gguf,
  writeGguf,
  type GgufEntry,
  type GgufTensorSource,
  bf16ToF32,
  bytesOf,
  viewAs,
} from "../../gguf/index.js";
import { ALIAS_PATTERN } from "../manifest.js";
import { writeAtomically } from "../writeAtomically.js";
import { ggufAlpha, readPeftConfig, type PeftConfig } from "./peftConfig.js";
import { listSome, PeftImportError } from "./errors.js";
import { mapPeftTensorName, permuteRowsForRope, PEFT_ARCHITECTURES, type MappedTensor } from "./mapping.js";
import { SafetensorsFile, type SafetensorsTensor } from "./safetensors.js";

export const PEFT_CONFIG_FILE = "adapter_config.json";
export const PEFT_WEIGHTS_FILE = "adapter_model.safetensors";

export interface ImportPeftOptions {
  /** The PEFT output folder: adapter_config.json and adapter_model.safetensors. */
  dir: string;
  /** The configured base model's header (readGgufHeader): architecture, tensor shapes, head counts. */
  base: GgufFile;
  /** The library alias; also general.name unless `name` is given. */
  alias: string;
  /** Where the GGUF LoRA goes. Written to a temporary file beside it, then renamed into place. */
  outFile: string;
  /** Replace an existing outFile (default: refuse). */
  overwrite?: boolean;
  /** general.name (default: the alias). */
  name?: string;
}

export interface ImportPeftResult {
  outFile: string;
  architecture: string;
  rank: number;
  /** adapter.lora.alpha as written: lora_alpha, or lora_alpha * sqrt(r) for rsLoRA. */
  alpha: number;
  /** The factor llama.cpp applies at scale 1 (alpha / rank), equal to PEFT's scaling. */
  scaling: number;
  /** GGUF tensors written (two per adapted weight). */
  tensors: number;
  /** Adapted base weights. */
  targets: number;
  /** Per source dtype, how many tensors, and what they became (F16 -> F16, F32 -> F32, BF16 -> F32). */
  dtypes: Record<string, number>;
  sha256: string;
}

interface Pair {
  target: string;
  order: number;
  module: string;
  a?: SafetensorsTensor;
  b?: SafetensorsTensor;
}

const SUPPORTED_DTYPES: Readonly<Record<string, GgmlType.F32 | GgmlType.F16>> = {
  F32: GgmlType.F32,
  F16: GgmlType.F16,
  BF16: GgmlType.F32,
};

/**
 * Converts a PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) into a GGUF LoRA for `base`,
 * without Python. Bytes are copied as they are (torch [r, in] is ggml ne [in, r]); F16 stays F16, F32 stays
 * F32, BF16 becomes F32 (exactly). Everything is checked before a byte is written, including llama.cpp's
 * own compatibility rules (`loraProblems`); the file appears only complete (temp file + rename).
 */
export async function importPeft(opts: ImportPeftOptions): Promise<ImportPeftResult> {
  const dir = resolve(opts.dir);
  const outFile = resolve(opts.outFile);
  if (!ALIAS_PATTERN.test(opts.alias)) {
    throw new PeftImportError(
      outFile,
      "alias",
      `"${opts.alias}" is not a valid alias: lowercase letters, digits, '-' or '_', starting with a letter, at most 32 characters`,
    );
  }
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new PeftImportError(dir, undefined, "is not a folder");
  if (existsSync(outFile) && !opts.overwrite)
    throw new PeftImportError(outFile, "outFile", "already exists (pass overwrite to replace it)");

  const configFile = join(dir, PEFT_CONFIG_FILE);
  const config = readPeftConfig(configFile);
  const invocation = config.alora_invocation_tokens ?? undefined;
  const vocabulary = opts.base.metadata.get("tokenizer.ggml.tokens");
  const vocabSize =
    vocabulary && typeof vocabulary === "object" && "items" in vocabulary ? vocabulary.items.length : Infinity;
  const outside = invocation?.filter((t) => t >= vocabSize) ?? [];
  if (outside.length)
    throw new PeftImportError(
      configFile,
      "alora_invocation_tokens",
      `names token ids outside the base model's vocabulary of ${vocabSize} (${listSome(outside.map(String))}): the adapter was trained for another tokenizer`,
    );
  const architecture = metaString(opts.base, "general.architecture");
  if (!architecture)
    throw new PeftImportError(opts.base.path, "general.architecture", "the base model names no architecture");
  const family = PEFT_ARCHITECTURES[architecture];
  if (!family) {
    throw new PeftImportError(
      opts.base.path,
      "general.architecture",
      `is "${architecture}"; PEFT import knows ${Object.keys(PEFT_ARCHITECTURES).join(", ")}`,
    );
  }

  const weightsPath = join(dir, PEFT_WEIGHTS_FILE);
  if (!existsSync(weightsPath))
    throw new PeftImportError(
      weightsPath,
      undefined,
      "is missing (only safetensors weights are supported, not adapter_model.bin)",
    );
  const st = SafetensorsFile.open(weightsPath);
  try {
    const pairs = collectPairs(st, config, weightsPath);
    const tensors = ggufTensors(st, pairs, opts.base, family.permuteQK, architecture);
    const alpha = ggufAlpha(config);
    const metadata: Record<string, GgufEntry> = {
      "general.architecture": gguf.str(architecture),
      "general.type": gguf.str("adapter"),
      "general.name": gguf.str(opts.name ?? opts.alias),
      "adapter.type": gguf.str("lora"),
      "adapter.lora.alpha": gguf.f32(alpha),
      ...(invocation ? { [ALORA_INVOCATION_KEY]: gguf.u32s(invocation) } : {}),
    };

    // llama.cpp's rules, checked on the header we are about to write (nothing is on disk yet)
    const planned: GgufFile = {
      path: outFile,
      version: 3,
      fileSize: 0,
      dataOffset: 0,
      metadata: new Map(
        Object.entries(metadata).map(([k, e]) => [
          k,
          "value" in e ? e.value : { itemType: e.itemType, items: e.items },
        ]),
      ),
      tensors: tensors.map((t): GgufTensorInfo => ({ name: t.name, shape: t.shape, type: t.type, offset: 0n })),
    };
    const check = loraProblems(planned, opts.base);
    if (check.problems.length) {
      throw new PeftImportError(
        weightsPath,
        "base model",
        `does not fit ${basename(opts.base.path)}: ${check.problems.join("; ")}`,
        check.problems,
      );
    }

    writeAtomically(outFile, (tmp) => {
      writeGguf(tmp, metadata, tensors);
      const written = loraProblems(readGgufHeader(tmp), opts.base);
      if (written.problems.length)
        throw new PeftImportError(outFile, "written file", written.problems.join("; "), written.problems);
    });

    const dtypes: Record<string, number> = {};
    for (const p of pairs) for (const t of [p.a!, p.b!]) dtypes[t.dtype] = (dtypes[t.dtype] ?? 0) + 1;
    return {
      outFile,
      architecture,
      rank: config.r,
      alpha,
      scaling: Math.fround(alpha) / config.r,
      tensors: tensors.length,
      targets: pairs.length,
      dtypes,
      sha256: await sha256File(outFile),
    };
  } finally {
    st.close();
  }
}

/**
 * Groups the safetensors tensors into A/B pairs per base weight, refusing anything that is not a plain LoRA of rank r.
 */
function collectPairs(st: SafetensorsFile, config: PeftConfig, file: string): Pair[] {
  const unmappable: string[] = [];
  const badDtype: string[] = [];
  const problems: string[] = [];
  const pairs = new Map<string, Pair>();
  for (const t of st.header.tensors) {
    const m: MappedTensor | undefined = mapPeftTensorName(t.name);
    if (!m) {
      unmappable.push(t.name);
      continue;
    }
    if (!(t.dtype in SUPPORTED_DTYPES)) badDtype.push(`${t.name} is ${t.dtype}`);
    const pair = pairs.get(m.target) ?? { target: m.target, order: m.order, module: m.module };
    if (pair[m.factor])
      problems.push(`${t.name} and ${pair[m.factor]!.name} are the same lora_${m.factor.toUpperCase()}`);
    pair[m.factor] = t;
    pairs.set(m.target, pair);
  }
  if (unmappable.length) {
    throw new PeftImportError(
      file,
      "tensor names",
      `${unmappable.length} tensor(s) map to no GGUF tensor: ${listSome(unmappable)}. Known: {base_model.model.}{model.}layers.N.{self_attn.{q,k,v,o}_proj,mlp.{gate,up,down}_proj}.lora_{A,B}{.default}.weight and lm_head`,
      unmappable,
    );
  }
  if (badDtype.length)
    throw new PeftImportError(
      file,
      "dtype",
      `unsupported dtype (F16, BF16 or F32 expected): ${listSome(badDtype)}`,
      badDtype,
    );
  if (pairs.size === 0) problems.push("it holds no LoRA tensors");
  for (const p of pairs.values()) {
    if (!p.a || !p.b) {
      problems.push(`${(p.a ?? p.b)!.name} has no lora_${p.a ? "B" : "A"}`);
      continue;
    }
    if (p.a.shape.length !== 2 || p.b.shape.length !== 2) {
      problems.push(`${p.target}: lora_A [${p.a.shape}] and lora_B [${p.b.shape}] are not matrices`);
      continue;
    }
    const [ra] = p.a.shape as [number, number];
    const rb = p.b.shape[1]!;
    if (ra !== config.r || rb !== config.r)
      problems.push(
        `${p.target}: lora_A [${p.a.shape}] and lora_B [${p.b.shape}] do not have rank r = ${config.r} (adapter_config.json)`,
      );
    if (p.a.shape.some((d) => d === 0) || p.b.shape.some((d) => d === 0)) problems.push(`${p.target}: empty factor`);
  }
  if (problems.length) throw new PeftImportError(file, "tensors", listSome(problems), problems);
  return [...pairs.values()].sort((x, y) => x.order - y.order);
}

/** lora_a ne [in, r] and lora_b ne [r, out]: torch's [r, in] and [out, r] read in ggml order, the same bytes. */
function ggufTensors(
  st: SafetensorsFile,
  pairs: readonly Pair[],
  base: GgufFile,
  permuteQK: boolean,
  arch: string,
): GgufTensorSource[] {
  const nHead = metaNumber(base, `${arch}.attention.head_count`);
  const nHeadKv = metaNumber(base, `${arch}.attention.head_count_kv`) ?? nHead;
  const out: GgufTensorSource[] = [];
  for (const p of pairs) {
    const a = p.a!;
    const b = p.b!;
    const heads = !permuteQK ? undefined : p.module === "q_proj" ? nHead : p.module === "k_proj" ? nHeadKv : undefined;
    if (heads !== undefined && (heads < 1 || b.shape[0]! % (heads * 2) !== 0)) {
      throw new PeftImportError(
        st.header.path,
        b.name,
        `${b.shape[0]} output rows do not split into ${heads} heads of rotary pairs (${arch}.attention.head_count*)`,
      );
    }
    out.push(
      {
        name: `${p.target}.lora_a`,
        shape: [a.shape[1]!, a.shape[0]!],
        type: SUPPORTED_DTYPES[a.dtype]!,
        data: () => ggmlBytes(st, a),
      },
      {
        name: `${p.target}.lora_b`,
        shape: [b.shape[1]!, b.shape[0]!],
        type: SUPPORTED_DTYPES[b.dtype]!,
        data: () => (heads === undefined ? ggmlBytes(st, b) : permuteRowsForRope(ggmlBytes(st, b), b.shape[0]!, heads)),
      },
    );
  }
  return out;
}

function ggmlBytes(st: SafetensorsFile, t: SafetensorsTensor): Uint8Array {
  const raw = st.read(t);
  return t.dtype === "BF16" ? bytesOf(bf16ToF32(viewAs(raw, Uint16Array, 2))) : raw;
}
