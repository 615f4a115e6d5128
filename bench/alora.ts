import { dirname, join, resolve } from "node:path";
import type { Engine } from "../src/engine/index.js";
import { loadManifest } from "../src/library/manifest.js";
import { PACKAGE_ROOT } from "../src/paths.js";
import type { ExchangeTexts, TrajectoryFigures } from "./toolTrajectory.js";
import { ENGINE_CONFIGS, trajectoryScenario } from "./trajectory.js";

/** The shipped Gemma 3 270M libraries S3 compares: standard LoRAs, then activated LoRAs (same data and recipe). */
export const GEMMA_LIBRARIES = ["gemma3", "gemma3-alora"] as const;

/** A shipped library's plan/search/write files and the texts its server renders around a load and a release. */
export function shippedLibrary(name: string): { adapters: Record<string, string>; texts: ExchangeTexts } {
  const manifest = join(PACKAGE_ROOT, "models", name, "manifest.json");
  const entries = loadManifest(manifest).filter((e) => ["plan", "search", "write"].includes(e.alias));
  return {
    adapters: Object.fromEntries(entries.map((e) => [e.alias, resolve(dirname(manifest), e.file)])),
    texts: Object.fromEntries(entries.map((e) => [e.alias, { activation: e.activation, release: e.release }])),
  };
}

export type LibraryLine = TrajectoryFigures & { library: string };

/**
 * S3 on Gemma 3 270M for both shipped libraries in one run: the 12-switch trajectory with tools as sleeps, the load
 * and release results rendered from each library's manifest (an aLoRA applies from its invocation there), the local
 * engine's reuse configurations, then llama-server (built from node-llama-cpp's bundled llama.cpp) with per-request LoRA on the
 * same token sequences, with `--swa-full`: one slot (the base's turns name every adapter at scale 0, so llama-server
 * clears the slot on each return to the base, as its aLoRA rule requires) and a slot per weight set.
 */
export async function aloraLibraries(opts: {
  modelPath: string;
  /** An engine on the same model, for rendering llama-server's requests (the texts come with the library). */
  renderer: Engine;
  threads: number;
  reps: number;
  onRun?: (f: LibraryLine) => void;
}): Promise<LibraryLine[]> {
  const lines: LibraryLine[] = [];
  for (const library of GEMMA_LIBRARIES) {
    const { adapters, texts } = shippedLibrary(library);
    const figures = await trajectoryScenario({
      modelPath: opts.modelPath,
      adapters,
      texts,
      renderer: opts.renderer,
      threads: opts.threads,
      switches: 12,
      reps: opts.reps,
      modes: ["sleep"],
      llamaServer: true,
      // Gemma 3 slides a window over most layers: without it llama-server cuts a slot back only to a checkpoint, and
      // an aLoRA's request always cuts back to its invocation (docs/remote-engines.md)
      llamaServerArgs: ["--swa-full"],
      // rebuild (every switch evaluates the history again) is S3's own baseline, twice the longest run here
      configs: ENGINE_CONFIGS.filter((c) => c.strategy !== "rebuild"),
      onRun: (f) => opts.onRun?.({ library, ...f }),
    });
    lines.push(...figures.map((f) => ({ library, ...f })));
  }
  return lines;
}

/**
 * The targets: on the aLoRA library, the best local configuration (least critical path) evaluates at most the tokens
 * llama-server's one slot does and waits at most as long; and beside it, each library's best and what the aLoRAs save.
 */
export function aloraTargets(lines: readonly LibraryLine[]): Record<string, string | number>[] {
  const local = (library: string) =>
    lines
      .filter((l) => l.library === library && ENGINE_CONFIGS.some((c) => c.strategy === l.strategy))
      .reduce((a, b) => (b.criticalPathMs < a.criticalPathMs ? b : a));
  const server = (library: string) => lines.find((l) => l.library === library && l.strategy === "llama-server")!;
  const alora = local("gemma3-alora");
  const anchor = server("gemma3-alora");
  const lora = local("gemma3");
  const ratio = (a: number, b: number) => Number((a / b).toFixed(2));
  const verdict = (ok: boolean) => (ok ? "met" : "MISSED");
  return [
    {
      target: "aLoRA library: local tokens evaluated <= llama-server's (one slot)",
      local: `${alora.evaluatedTokens} (${alora.strategy})`,
      "llama-server": anchor.evaluatedTokens,
      ratio: ratio(alora.evaluatedTokens, anchor.evaluatedTokens),
      verdict: verdict(alora.evaluatedTokens <= anchor.evaluatedTokens),
    },
    {
      target: "aLoRA library: local critical path <= llama-server's (one slot)",
      local: `${alora.criticalPathMs} ms (${alora.strategy})`,
      "llama-server": `${anchor.criticalPathMs} ms`,
      ratio: ratio(alora.criticalPathMs, anchor.criticalPathMs),
      verdict: verdict(alora.criticalPathMs <= anchor.criticalPathMs),
    },
    {
      target: "aLoRA / LoRA library, local best: tokens evaluated, critical path",
      local: `${alora.evaluatedTokens} / ${lora.evaluatedTokens}; ${alora.criticalPathMs} / ${lora.criticalPathMs} ms`,
      "llama-server": `${anchor.evaluatedTokens} / ${server("gemma3").evaluatedTokens}; ${anchor.criticalPathMs} / ${server("gemma3").criticalPathMs} ms`,
      ratio: ratio(alora.criticalPathMs, lora.criticalPathMs),
      verdict: "-",
    },
  ];
}
