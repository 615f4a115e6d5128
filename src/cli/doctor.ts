import { statSync } from "node:fs";
import { functionCallProblem } from "../modelProbe/callSyntax.js";
import { probeModelDetailsInChild } from "../modelProbe/probe.js";
import {
  GgmlType,
  GgufFormatError,
  metaNumber,
  metaString,
  readGgufHeader,
  type GgufFile,
  baseModelProblems,
  loraProblems,
  sha256File,
} from "../gguf/index.js";
import type { ResolvedConfig } from "../config/loadConfig.js";
import { loadManifest } from "../library/manifest.js";
import { kvCacheSize } from "../llamaCpp/kvCacheSize.js";

/** One verdict of `weact-mcp doctor`: `ok: false` means the set will not serve. */
export interface Check {
  check: string;
  ok: boolean;
  detail: string;
}

const MiB = 1024 * 1024;

/** ggml's name for a tensor type; an id ggml.h does not (yet) list is shown as its number. */
const typeName = (type: number): string => GgmlType[type] ?? `type ${type}`;

function quantOf(file: GgufFile): string {
  const counts = new Map<string, number>();
  for (const t of file.tensors)
    if (t.shape.length >= 2) counts.set(typeName(t.type), (counts.get(typeName(t.type)) ?? 0) + 1);
  return (
    [...counts]
      .sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `${k} x${n}`)
      .join(", ") || "(no weight matrices)"
  );
}

/**
 * Checks a model (and an adapter manifest) without loading llama.cpp in this process: the GGUF headers here,
 * node-llama-cpp's view (chat wrapper, call syntax, GPU types) in the probe's child process.
 */
export async function doctor(
  modelPath: string,
  manifestPath: string | undefined,
  config: ResolvedConfig,
): Promise<Check[]> {
  const checks: Check[] = [];
  let base: GgufFile;
  try {
    base = readGgufHeader(modelPath);
  } catch (err) {
    return [
      { check: "model file", ok: false, detail: err instanceof GgufFormatError ? err.reason : (err as Error).message },
    ];
  }
  const arch = metaString(base, "general.architecture") ?? "(missing)";
  const problems = baseModelProblems(base);
  checks.push({
    check: "architecture",
    ok: problems.length === 0,
    detail: problems.length ? problems.join("; ") : `${arch} (${metaString(base, "general.name") ?? "unnamed"})`,
  });
  checks.push({ check: "quant type", ok: true, detail: quantOf(base) });
  if (problems.length) return checks;

  const probe = await probeModelDetailsInChild(modelPath);
  if (!probe.ok) return [...checks, { check: "llama.cpp load", ok: false, detail: probe.reason }];
  const callProblem = functionCallProblem(probe.details);
  checks.push({
    check: "chat wrapper",
    ok: !callProblem,
    detail: callProblem
      ? `${probe.details.chatWrapper}: ${callProblem}; use the tool-calling variant of the model`
      : `${probe.details.chatWrapper}${
          metaString(base, "tokenizer.chat_template") === undefined
            ? " (the GGUF has no chat template: node-llama-cpp's wrapper for the architecture)"
            : ""
        }, function calls start with ${JSON.stringify(probe.details.callPrefix)}`,
  });
  const window = metaNumber(base, `${arch}.attention.sliding_window`);
  // as the engine resolves it (engines/local LocalEngine)
  const swaFullCache = config.model.swaFullCache ?? config.model.batchInvariant;
  if (window)
    checks.push({
      check: "sliding window",
      ok: true,
      detail: `${window} tokens; model.swaFullCache ${swaFullCache} (${
        swaFullCache ? "every token's KV kept: a cache cut anywhere continues" : "window-sized SWA cache: less memory"
      })`,
    });
  const trained = metaNumber(base, `${arch}.context_length`) ?? 0;
  const context = Math.min(config.model.contextSize, trained);
  checks.push({
    check: "context length",
    ok: context >= 2048,
    detail: `trained ${trained}, configured model.contextSize ${config.model.contextSize}: serving ${context}${context < 2048 ? " (too short for the weight-action prompts; raise model.contextSize)" : ""}`,
  });

  let adapterBytes = 0;
  if (manifestPath) {
    let entries;
    try {
      entries = loadManifest(manifestPath);
    } catch (err) {
      return [...checks, { check: "adapter manifest", ok: false, detail: (err as Error).message }];
    }
    // hashed only when an entry records its base (a few seconds for a large model)
    const baseSha256 = entries.some((e) => e.baseSha256) ? await sha256File(modelPath) : undefined;
    for (const e of entries) {
      let lora: GgufFile;
      try {
        lora = readGgufHeader(e.filePath);
      } catch (err) {
        checks.push({
          check: `adapter ${e.alias}`,
          ok: false,
          detail: err instanceof GgufFormatError ? `${e.filePath}: ${err.reason}` : (err as Error).message,
        });
        continue;
      }
      adapterBytes += lora.fileSize;
      const r = loraProblems(lora, base);
      const ranks = new Set(lora.tensors.filter((t) => t.name.endsWith(".lora_a")).map((t) => t.shape[1]));
      const rankProblem = ranks.size > 1 ? `mixed ranks ${[...ranks].join(", ")} across its tensors` : undefined;
      const types = [...new Set(lora.tensors.map((t) => typeName(t.type)))].join("/");
      const otherBase =
        e.baseSha256 && e.baseSha256 !== baseSha256
          ? `made for the base model with SHA-256 ${e.baseSha256}, not this one (${baseSha256}) [adapter_base_mismatch]`
          : undefined;
      const bad = [...r.problems, ...(rankProblem ? [rankProblem] : []), ...(otherBase ? [otherBase] : [])];
      checks.push({
        check: `adapter ${e.alias}`,
        ok: bad.length === 0,
        detail: bad.length
          ? bad.join("; ")
          : `${metaString(lora, "general.architecture")}, rank ${r.shape?.rank}, alpha ${r.shape?.alpha ?? "(unset)"}, ${r.shape?.targets} targets, ${types}`,
      });
    }
  }

  // what llama.cpp allocates for the engine's contexts, each as the engine creates it (engines/local ContextMaker)
  const { maxContexts, sequencesPerContext, batchSize } = config.model;
  const kv = kvCacheSize(base, { contextSize: context, sequences: sequencesPerContext, batchSize, swaFullCache });
  const kvBytes = kv.bytes * maxContexts;
  const swaCells =
    kv.cells.swa === undefined
      ? ""
      : `; ${kv.layers.swa} sliding-window layers of ${kv.cells.swa} cells a sequence${swaFullCache ? " (model.swaFullCache)" : ` (window ${kv.window} + batch)`}, ${kv.layers.full} full of ${kv.cells.full}`;
  const total = statSync(modelPath).size + adapterBytes + kvBytes;
  checks.push({
    check: "memory estimate",
    ok: true,
    detail: `${(total / MiB).toFixed(1)} MiB: model ${(base.fileSize / MiB).toFixed(1)}, adapters ${(adapterBytes / MiB).toFixed(1)}, KV ${(kvBytes / MiB).toFixed(1)} (${maxContexts} context${maxContexts === 1 ? "" : "s"} x ${sequencesPerContext} sequences x ${context} tokens${swaCells})`,
  });
  const gpus = probe.details.gpuTypes;
  checks.push({
    check: "GPU offload",
    ok: true,
    detail: gpus.length ? `available: ${gpus.join(", ")}` : "none: CPU only (set model.threads to the core count)",
  });
  return checks;
}

export function formatChecks(checks: readonly Check[]): string {
  return checks.map((c) => `${c.ok ? "ok  " : "FAIL"} ${c.check}: ${c.detail}`).join("\n");
}
