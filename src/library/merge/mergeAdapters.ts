import { resolve } from "node:path";
import {
  ALORA_INVOCATION_KEY,
  bytesOf,
  f16ToF32,
  f32ToF16,
  GgmlType,
  gguf,
  metaNumber,
  metaString,
  readGgufHeader,
  sha256File,
  viewAs,
  writeGguf,
  type GgufFile,
  type GgufTensorInfo,
  type GgufTensorSource,
} from "../../gguf/index.js";
import { listSome } from "../peft/errors.js";
import { readGgufTensorData } from "../peft/ggufData.js";
import { writeAtomically } from "../writeAtomically.js";
import { LoraMergeError } from "./errors.js";
import { mergeLora, type LoraFactors } from "./methods.js";
import { uniformDraws } from "./uniformDraws.js";
import { effectiveSettings, type MergeSettings } from "./settings.js";

/** One adapter of the library to merge. */
export interface MergeInput {
  alias: string;
  /** Its GGUF LoRA. */
  file: string;
  /** Its manifest scale: an adapter enters the merge as the library serves it (scale x alpha / r). */
  scale: number;
}

export interface MergeAdaptersOptions {
  adapters: readonly MergeInput[];
  /**
   * Checked by MergeSettingsSchema (the CLI's flags, a manifest's merge record); one weight per adapter. A density or
   * seed left out is the method's default (effectiveSettings).
   */
  settings: MergeSettings;
  /** Written to a temporary file beside it, then renamed into place (an existing file is replaced). */
  outFile: string;
  /** general.name: the merged adapter's alias. */
  name: string;
}

export interface MergeAdaptersResult {
  outFile: string;
  architecture: string;
  rank: number;
  /** Adapted base weights (two tensors each). */
  targets: number;
  /** F16 when every input factor is F16, else F32. */
  type: "F16" | "F32";
  sha256: string;
}

interface Adapter {
  input: MergeInput;
  header: GgufFile;
  rank: number;
  /** PEFT's scaling of the adapter as served. */
  scaling: number;
}

const LORA_A = ".lora_a";
const LORA_B = ".lora_b";

/**
 * Merges GGUF LoRAs of one base into one GGUF LoRA the way PEFT's `add_weighted_adapter` merges LoRA adapters
 * (methods.ts): every adapter must adapt the same tensors with the same shapes and one rank. The merged adapter has
 * that rank and alpha = rank (scaling 1), the metadata importPeft writes, and F16 factors when every input's are F16
 * (F32 otherwise). One target is merged at a time, as the file is written. GGUF's lora_a (ne [in, r]) and lora_b
 * (ne [r, out]) are torch's [r, in] and [out, r] in the same element order, so nothing is transposed.
 */
export async function mergeAdapters(opts: MergeAdaptersOptions): Promise<MergeAdaptersResult> {
  const outFile = resolve(opts.outFile);
  const settings = effectiveSettings(opts.settings);
  if (opts.adapters.length === 0) throw new LoraMergeError(undefined, "no adapters to merge");
  if (settings.weights.length !== opts.adapters.length)
    throw new LoraMergeError(
      undefined,
      `${settings.weights.length} weight(s) for ${opts.adapters.length} adapters (${opts.adapters.map((a) => a.alias).join(", ")}): give one each`,
    );
  const adapters = opts.adapters.map(readAdapter);
  const first = adapters[0]!;
  const architecture = metaString(first.header, "general.architecture")!;
  for (const adapter of adapters.slice(1)) checkSameShape(adapter, first);
  const type = adapters.every((a) => a.header.tensors.every((t) => t.type === GgmlType.F16))
    ? GgmlType.F16
    : GgmlType.F32;

  const tensors: GgufTensorSource[] = [];
  for (const a of first.header.tensors.filter((t) => t.name.endsWith(LORA_A))) {
    const target = a.name.slice(0, -LORA_A.length);
    const b = first.header.tensors.find((t) => t.name === `${target}${LORA_B}`)!;
    // computed when lora_a is written and dropped once lora_b is: the writer takes the tensors in this order
    let merged: { a: Float32Array; b: Float32Array } | undefined;
    const merge = () =>
      (merged ??= mergeLora(
        adapters.map((adapter) => factorsOf(adapter, target)),
        {
          method: settings.method,
          weights: settings.weights,
          density: settings.density ?? 1,
          random: uniformDraws(settings.seed ?? 0, target),
        },
      ));
    tensors.push(
      { name: a.name, shape: a.shape, type, data: () => encode(merge().a, type) },
      {
        name: b.name,
        shape: b.shape,
        type,
        data: () => {
          const factor = merge().b;
          merged = undefined;
          return encode(factor, type);
        },
      },
    );
  }
  writeAtomically(outFile, (tmp) =>
    writeGguf(
      tmp,
      {
        "general.architecture": gguf.str(architecture),
        "general.type": gguf.str("adapter"),
        "general.name": gguf.str(opts.name),
        "adapter.type": gguf.str("lora"),
        "adapter.lora.alpha": gguf.f32(first.rank),
      },
      tensors,
    ),
  );
  return {
    outFile,
    architecture,
    rank: first.rank,
    targets: tensors.length / 2,
    type: type === GgmlType.F16 ? "F16" : "F32",
    sha256: await sha256File(outFile),
  };
}

/** An adapter's header, checked to be a plain GGUF LoRA of one rank with F16 or F32 factors in pairs. */
function readAdapter(input: MergeInput): Adapter {
  const fail = (reason: string): never => {
    throw new LoraMergeError(input.alias, `${input.file}: ${reason}`);
  };
  let header: GgufFile;
  try {
    header = readGgufHeader(input.file);
  } catch (err) {
    return fail((err as Error).message);
  }
  if (metaString(header, "general.type") !== "adapter" || metaString(header, "adapter.type") !== "lora")
    fail("is not a GGUF LoRA (general.type adapter, adapter.type lora)");
  if (!metaString(header, "general.architecture")) fail("names no architecture (general.architecture)");
  if (header.metadata.has(ALORA_INVOCATION_KEY))
    fail(
      "is an activated LoRA: it applies only from its invocation point, so it cannot join a merge applied to every token",
    );
  const names = new Set(header.tensors.map((t) => t.name));
  const problems: string[] = [];
  for (const t of header.tensors) {
    const pair = t.name.endsWith(LORA_A)
      ? `${t.name.slice(0, -LORA_A.length)}${LORA_B}`
      : t.name.endsWith(LORA_B)
        ? `${t.name.slice(0, -LORA_B.length)}${LORA_A}`
        : undefined;
    if (pair === undefined) problems.push(`${t.name} is not a lora_a or lora_b factor`);
    else if (!names.has(pair)) problems.push(`${t.name} has no ${pair}`);
    if (t.type !== GgmlType.F16 && t.type !== GgmlType.F32)
      problems.push(`${t.name} has ggml type ${GgmlType[t.type] ?? t.type} (a merge takes F16 and F32 factors)`);
    if (t.shape.length !== 2) problems.push(`${t.name} has shape [${t.shape}], not a matrix`);
  }
  if (!header.tensors.length) problems.push("it holds no tensors");
  if (problems.length) fail(listSome(problems));
  const ranks = [...new Set(header.tensors.filter((t) => t.name.endsWith(LORA_A)).map((t) => t.shape[1]!))];
  if (ranks.length > 1) fail(`its factors have ranks ${ranks.join(", ")}; PEFT merges adapters of one rank`);
  const rank = ranks[0]!;
  const alpha = metaNumber(header, "adapter.lora.alpha");
  // llama.cpp applies a LoRA without alpha (or alpha 0) at scaling 1
  return { input, header, rank, scaling: input.scale * (alpha ? alpha / rank : 1) };
}

/** The same architecture, rank, tensors and shapes as `first`, or an error naming the adapter and what differs. */
function checkSameShape(adapter: Adapter, first: Adapter): void {
  const fail = (reason: string): never => {
    throw new LoraMergeError(adapter.input.alias, reason);
  };
  const arch = (a: Adapter) => metaString(a.header, "general.architecture");
  if (arch(adapter) !== arch(first))
    fail(`its architecture is ${arch(adapter)}, ${first.input.alias}'s is ${arch(first)}: merge adapters of one base`);
  if (adapter.rank !== first.rank)
    fail(
      `its rank is ${adapter.rank}, ${first.input.alias}'s is ${first.rank}: PEFT merges (linear, ties, dare-ties) need one rank`,
    );
  const theirs = new Map(first.header.tensors.map((t) => [t.name, t]));
  const ours = new Map(adapter.header.tensors.map((t) => [t.name, t]));
  const missing = [...theirs.keys()].filter((n) => !ours.has(n));
  const extra = [...ours.keys()].filter((n) => !theirs.has(n));
  const reshaped = [...ours.values()]
    .filter((t) => theirs.has(t.name) && String(theirs.get(t.name)!.shape) !== String(t.shape))
    .map((t) => `${t.name} is [${t.shape}], ${first.input.alias}'s [${theirs.get(t.name)!.shape}]`);
  const problems = [
    ...(missing.length ? [`it does not adapt ${listSome(missing)}, which ${first.input.alias} does`] : []),
    ...(extra.length ? [`it adapts ${listSome(extra)}, which ${first.input.alias} does not`] : []),
    ...reshaped,
  ];
  if (problems.length) fail(`${problems.join("; ")}: a merge takes adapters of the same targets and shapes`);
}

function factorsOf(adapter: Adapter, target: string): LoraFactors {
  const read = (name: string) => {
    const info = adapter.header.tensors.find((t) => t.name === name)!;
    return decode(readGgufTensorData(adapter.header, info), info);
  };
  return { a: read(`${target}${LORA_A}`), b: read(`${target}${LORA_B}`), scaling: adapter.scaling };
}

function decode(bytes: Buffer, info: GgufTensorInfo): Float32Array {
  return info.type === GgmlType.F16 ? f16ToF32(viewAs(bytes, Uint16Array, 2)) : viewAs(bytes, Float32Array, 4);
}

function encode(values: Float32Array, type: GgmlType): Uint8Array {
  return bytesOf(type === GgmlType.F16 ? f32ToF16(values) : values);
}
