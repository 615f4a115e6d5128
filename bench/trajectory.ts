import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { CacheOptions } from "../src/engines/local/index.js";
import type { Engine } from "../src/engine/index.js";
import { startLlamaServer } from "../testkit/llamaServerProcess.js";
import { median } from "./stats.js";
import {
  calibrateWork,
  openingConversation,
  runTool,
  toolTrajectory,
  TOOL_MS,
  type ExchangeTexts,
  type TrajectoryFigures,
  type TrajectoryRunConfig,
} from "./toolTrajectory.js";

/** A configuration of the local engine the scenario runs, in a process of its own. */
export interface EngineConfig {
  strategy: string;
  cache: CacheOptions;
  /** The engine's `swaFullCache` (sliding-window models only); default the engine's. */
  swaFullCache?: boolean;
}

/** The local engine's configurations the scenario compares, each in its own process. */
export const ENGINE_CONFIGS: readonly EngineConfig[] = [
  { strategy: "rebuild", cache: { strategy: "rebuild" } },
  { strategy: "reuse", cache: { strategy: "reuse", sharedPrefixes: false, background: false } },
  { strategy: "reuse+shared", cache: { strategy: "reuse", sharedPrefixes: true, background: false } },
  { strategy: "reuse+shared+background", cache: { strategy: "reuse", sharedPrefixes: true, background: true } },
];

// the random demo model writes bytes that are not text: llama-server answers 500 without one
const GRAMMAR = "root ::= [a-z ]*";

interface Completion {
  timings: { prompt_n: number; prompt_ms: number };
}

/**
 * The same token sequences through llama-server with per-request LoRA: `slots` "one" keeps the whole trajectory in
 * one slot (its cache is cleared whenever the adapter changes), "per-weights" gives each weight set a slot of its
 * own (its best: a return to an adapter continues that slot's cache, like `reuse`).
 */
async function llamaServerRun(
  engine: Engine,
  modelPath: string,
  adapters: Record<string, string>,
  slots: "one" | "per-weights",
  tools: "sleep" | "cpu",
  work: number,
  switches: number,
  threads: number,
  texts: ExchangeTexts | undefined,
  extraArgs: readonly string[] | undefined,
): Promise<TrajectoryFigures> {
  const aliases = Object.keys(adapters);
  const server = await startLlamaServer({
    model: modelPath,
    adapters: Object.values(adapters),
    threads,
    slots: slots === "one" ? 1 : aliases.length + 1,
    contextPerSlot: 8192,
    extraArgs,
  });
  const f: TrajectoryFigures = {
    strategy: slots === "one" ? "llama-server" : "llama-server/slot-per-weights",
    tools,
    switches: 0,
    evaluatedTokens: 0,
    backgroundTokens: 0,
    criticalPathMs: 0,
    switchMs: 0,
    wallMs: 0,
  };
  try {
    let active: string | null = null;
    const complete = async (tokens: number[]) => {
      const index = active === null ? -1 : aliases.indexOf(active);
      const body = {
        prompt: tokens,
        n_predict: 16,
        temperature: 0,
        cache_prompt: true,
        grammar: GRAMMAR,
        id_slot: slots === "one" ? 0 : index + 1,
        lora: aliases.map((_, i) => ({ id: i, scale: i === index ? 1 : 0 })),
      };
      const res = await fetch(`${server.url}/completion`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!res.ok)
        throw new Error(`llama-server /completion answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
      return (await res.json()) as Completion;
    };
    const steps = toolTrajectory(switches, texts);
    // warm-up (compute buffers, one short request): the first turn itself must find no cache, as in the engine runs
    await complete(engine.renderTokens(openingConversation()).slice(0, 32));
    const started = performance.now();
    for (const step of steps) {
      if (step.kind === "turn") {
        const { timings } = await complete(engine.renderTokens(step.conversation));
        f.evaluatedTokens += timings.prompt_n;
        // the switch happens inside the first request under the new weights: its prompt processing is the switch's cost
        if (step.afterSwitch) {
          f.criticalPathMs += timings.prompt_ms;
          f.switchMs += timings.prompt_ms;
        }
      } else if (step.kind === "switch") {
        active = step.to;
        f.switches++;
      } else {
        await runTool(step.name, step.ms, tools, work);
      }
    }
    f.wallMs = performance.now() - started;
  } finally {
    await server.stop();
  }
  return f;
}

async function engineRun(config: TrajectoryRunConfig): Promise<TrajectoryFigures> {
  const child = fileURLToPath(new URL("./trajectoryRun.js", import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [child, JSON.stringify(config)], {
    maxBuffer: 1 << 20,
    env: process.env,
  });
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as TrajectoryFigures;
}

export interface TrajectoryScenarioOptions {
  modelPath: string;
  adapters: Record<string, string>;
  /** An engine on the same model, for rendering the llama-server requests' tokens. */
  renderer: Engine;
  threads: number;
  switches: number;
  reps: number;
  modes: readonly ("sleep" | "cpu")[];
  llamaServer: boolean;
  /** The local configurations to run; default ENGINE_CONFIGS (extra ones are reported, not ranked as `best`). */
  configs?: readonly EngineConfig[];
  /** The library's load and release texts (an activated LoRA's invocation is in them); default the scenario's own. */
  texts?: ExchangeTexts;
  /** llama-server's flags beyond the ones it always gets (`--swa-full` for a sliding-window model's aLoRAs). */
  llamaServerArgs?: readonly string[];
  /** Called with each run's figures as it ends (before the medians). */
  onRun?: (f: TrajectoryFigures) => void;
}

/**
 * The trajectory scenario: every configuration (the local engine's, then llama-server's) in turn, `reps` rounds,
 * per tool mode; each line holds the medians of its runs.
 */
export async function trajectoryScenario(opts: TrajectoryScenarioOptions): Promise<TrajectoryFigures[]> {
  const work = opts.modes.includes("cpu") ? await calibrateWork(TOOL_MS.run_code) : 0;
  const lines: TrajectoryFigures[] = [];
  for (const tools of opts.modes) {
    const runs = new Map<string, TrajectoryFigures[]>();
    const add = (f: TrajectoryFigures) => {
      opts.onRun?.(f);
      runs.set(f.strategy, [...(runs.get(f.strategy) ?? []), f]);
    };
    for (let rep = 0; rep < opts.reps; rep++) {
      for (const c of opts.configs ?? ENGINE_CONFIGS)
        add(
          await engineRun({
            ...c,
            modelPath: opts.modelPath,
            adapters: opts.adapters,
            tools,
            work,
            switches: opts.switches,
            threads: opts.threads,
            texts: opts.texts,
          }),
        );
      if (opts.llamaServer) {
        for (const slots of ["one", "per-weights"] as const)
          add(
            await llamaServerRun(
              opts.renderer,
              opts.modelPath,
              opts.adapters,
              slots,
              tools,
              work,
              opts.switches,
              opts.threads,
              opts.texts,
              opts.llamaServerArgs,
            ),
          );
      }
    }
    for (const [strategy, fs] of runs) {
      const med = (k: keyof TrajectoryFigures) => Number(median(fs.map((f) => f[k] as number)).toFixed(1));
      const line: TrajectoryFigures = {
        strategy,
        tools,
        switches: fs[0]!.switches,
        evaluatedTokens: med("evaluatedTokens"),
        backgroundTokens: med("backgroundTokens"),
        criticalPathMs: med("criticalPathMs"),
        switchMs: med("switchMs"),
        wallMs: med("wallMs"),
      };
      if (fs[0]!.rssWithContextsMB !== undefined)
        Object.assign(line, { rssLoadedMB: med("rssLoadedMB"), rssWithContextsMB: med("rssWithContextsMB") });
      if (fs[0]!.maxWaitForBackgroundMs !== undefined)
        Object.assign(line, {
          maxWaitForBackgroundMs: Math.max(...fs.map((f) => f.maxWaitForBackgroundMs!)),
          maxBackgroundDecodeMs: Math.max(...fs.map((f) => f.maxBackgroundDecodeMs!)),
        });
      lines.push(line);
    }
  }
  return lines;
}

/**
 * The ratios the targets are stated in: the best local configuration against rebuild, llama-server and plain reuse, per
 * tool mode.
 */
export function trajectoryRatios(lines: readonly TrajectoryFigures[]) {
  return [...new Set(lines.map((l) => l.tools))].map((tools) => {
    const of = (s: string) => lines.find((l) => l.tools === tools && l.strategy === s);
    const local = lines.filter((l) => l.tools === tools && ENGINE_CONFIGS.some((c) => c.strategy === l.strategy));
    const best = local.reduce((a, b) => (b.criticalPathMs < a.criticalPathMs ? b : a));
    const ratio = (a: number | undefined, b: number | undefined) => (a && b ? Number((a / b).toFixed(2)) : null);
    return {
      tools,
      best: best.strategy,
      criticalPath_rebuild_over_best: ratio(of("rebuild")?.criticalPathMs, best.criticalPathMs),
      criticalPath_llamaServer_over_best: ratio(of("llama-server")?.criticalPathMs, best.criticalPathMs),
      criticalPath_llamaServerSlots_over_best: ratio(
        of("llama-server/slot-per-weights")?.criticalPathMs,
        best.criticalPathMs,
      ),
      wall_best_over_reuse: ratio(best.wallMs, of("reuse")?.wallMs),
    };
  });
}
