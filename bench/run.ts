/**
 * npm run bench [-- --big] [-- --model NAME|PATH [--adapters a=PATH,b=PATH]] [-- --scenario
 * trajectory|prefix|concurrency|remote-concurrency|binding|invariance|alora [--rounds N]] [--json]
 * Every figure is measured side by side in this one run and printed as a ratio to its baseline.
 */
import { parseArgs } from "node:util";
import { LocalEngine } from "../src/engines/local/index.js";
import type { CacheStrategy } from "../src/engine/index.js";
import { returnSwitch, STRATEGIES, trajectoryComparison } from "./cache.js";
import { ensureDemoWeights } from "../src/demo/ensure.js";
import { demoWeightsExist, demoWeightPaths, generateDemoWeights } from "../src/demo/demoWeights.js";
import { createLogger } from "../src/log.js";
import { PACKAGE_ROOT } from "../src/paths.js";
import { interleaving, sharedPrefixVsPrefill, switchVsPrefill, switchCallCost } from "./engine.js";
import { openingConversation, type TrajectoryFigures } from "./toolTrajectory.js";
import { ENGINE_CONFIGS, trajectoryRatios, trajectoryScenario, type EngineConfig } from "./trajectory.js";
import { fetchModel, ModelNotFetchedError, resolveModelArg } from "../src/modelFiles/index.js";
import { gemmaTestAdapters } from "../testkit/realModelAdapters.js";
import { adapterMemory } from "./memory.js";
import { loadLoraRoundTrip, toolRoundTrips } from "./mcp.js";
import { compareIndexes } from "./search.js";
import { DEFAULT_CORPUS } from "../src/paths.js";
import { writeFileSync, mkdtempSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { fmt, table } from "./stats.js";
import { invarianceBench } from "./invariance.js";
import { concurrencyComparison, demoTarget, gemmaTarget } from "./concurrency.js";
import { remoteConcurrency } from "./remoteConcurrency.js";
import { bindingComparison } from "./binding.js";
import { aloraLibraries, aloraTargets } from "./alora.js";
import { sourceBinding } from "../testkit/bindingBuild.js";

const { values } = parseArgs({
  options: {
    big: { type: "boolean", default: false },
    model: { type: "string" },
    adapters: { type: "string" },
    reps: { type: "string", default: "7" },
    /**
     * Only one scenario: `trajectory` (what the caller waits for on the replayed soft trajectory with tool
     * latencies), `prefix` (shared prefix restore vs prefill), `concurrency` (1/4/16 sessions, local vs
     * llama-server, on the demo model or with `--model gemma-3-270m` on Gemma 3 270M; the local engine on the prebuilt
     * and the source-built binding) or `remote-concurrency` (1/4/16 sessions on Gemma 3 270M: local, llama-server, vLLM
     * through weact-mcp and vLLM directly) or `binding` (prefill and decode tokens/s with node-llama-cpp's prebuilt
     * binding vs the source build, on the demo model and Gemma 3 270M) or `invariance` (1/4/16 sessions on the local
     * engine with model.batchInvariant true and false: what the same tokens under any load cost) or `alora` (S3 on
     * Gemma 3 270M for the shipped LoRA and aLoRA libraries, the local engine beside llama-server).
     */
    scenario: { type: "string" },
    /**
     * The concurrency scenarios' rounds (each session: load, turn, release, turn, per round; default 3 on the demo
     * model, 1 on Gemma 3 270M); the binding scenario's (each binding once per round, default 3).
     */
    rounds: { type: "string" },
    /** With --scenario: one JSON line per result instead of tables. */
    json: { type: "boolean", default: false },
    /** The trajectory scenario's rounds (each configuration once per round, per tool mode). */
    "trajectory-reps": { type: "string", default: "2" },
    /** The trajectory scenario's tool modes: sleep (tools as sleeps), cpu (run_code a real computation). */
    tools: { type: "string", default: "sleep,cpu" },
    /** Evaluation threads of every engine in the run (llama-server's too); default: the machine's cores. */
    threads: { type: "string" },
  },
});
const logger = createLogger(process.env.WEACT_LOG_LEVEL ?? "warn");
const threads = values.threads ? Number(values.threads) : undefined;
const reps = Number(values.reps);
const section = (title: string) => process.stdout.write(`\n## ${title}\n`);

type Sizes = {
  s1: number[];
  s1Reps: number;
  s2History: number;
  prefixReps: number;
  trajectorySwitches: number;
  /** S1/S2 repetitions instead of --reps. */
  reps?: number;
  /** Printed with the figures: how the sizes differ from the demo model's. */
  note?: string;
};
/** S1 compares two timings of tens of ms on a shared VM: it needs more pairs than the other scenarios. */
const DEMO_SIZES: Sizes = { s1: [256, 1024, 4096], s1Reps: 15, s2History: 4096, prefixReps: 7, trajectorySwitches: 12 };
/**
 * A 0.6B model prefills ~80 tokens a second on two cores: the same scenarios, shorter (the trajectory's first four
 * switches).
 */
const BIG_SIZES: Sizes = { s1: [256, 1024], s1Reps: 1, s2History: 1024, prefixReps: 1, trajectorySwitches: 4 };
/**
 * A real model given with --model (Gemma 3 270M prefills ~230 tokens a second per thread): S1 without the 4096-token
 * history, S2 on a 1024-token one, two repetitions each; the trajectory keeps all 12 switches, one round, tools as sleeps.
 */
const MODEL_SIZES: Sizes = {
  s1: [256, 1024],
  s1Reps: 2,
  s2History: 1024,
  prefixReps: 1,
  trajectorySwitches: 12,
  reps: 2,
  note: "shrunk for a real model's speed: S1 at 256 and 1024 tokens (demo: up to 4096), S2 on a 1024-token history (demo: 4096), 2 repetitions each (demo: 7-15); S3 one round, tools as sleeps",
};

async function withEngine<T>(
  modelPath: string,
  adapters: Record<string, string>,
  strategy: CacheStrategy,
  fn: (e: LocalEngine) => Promise<T>,
): Promise<T> {
  const engine = await LocalEngine.load({
    modelPath,
    gpu: false,
    logger,
    threads,
    contextSize: 8192,
    sequencesPerContext: 2,
    maxContexts: 2,
    cache: { strategy },
  });
  try {
    for (const [alias, filePath] of Object.entries(adapters)) await engine.addAdapter({ alias, filePath, scale: 1 });
    return await fn(engine);
  } finally {
    await engine.dispose();
  }
}

/** S1 and S2 under every strategy (and, once, the switch call and interleaving sessions), printed as tables. */
async function switchScenarios(modelPath: string, adapters: Record<string, string>, label: string, sizes: Sizes) {
  const s1: Record<string, string | number>[] = [];
  const s2: Partial<Record<CacheStrategy, Awaited<ReturnType<typeof returnSwitch>>>> = {};
  const scenarioReps = sizes.reps ?? reps;
  for (const strategy of STRATEGIES) {
    await withEngine(modelPath, adapters, strategy, async (engine) => {
      if (strategy === "rebuild") {
        if (!values.json) process.stdout.write(`\n# ${label}: ${modelPath} (threads ${engine.threads})\n`);
        else
          emit("engine", label, [{ modelPath, threads: engine.threads, ...(sizes.note ? { note: sizes.note } : {}) }]);
        const sw = await switchCallCost(engine);
        emit(
          "switch-call",
          label,
          [{ switchUsP50: fmt(sw.switchUsP50, 1), withLockUsP50: fmt(sw.withQueueUsP50, 1) }],
          "switch call (weight change only; no file I/O, no reload)",
        );
        emit(
          "interleaving",
          label,
          [await interleaving(engine, 6, 8)],
          "two sessions interleaving generate calls: different adapters / same adapter",
        );
      }
      for (const n of sizes.s1)
        s1.push({ strategy, ...(await switchVsPrefill(engine, n, Math.max(scenarioReps, sizes.s1Reps))) });
      s2[strategy] = await returnSwitch(engine, sizes.s2History, 64, scenarioReps);
    });
  }
  emit(
    "S1",
    label,
    s1,
    "S1 single switch to an adapter: switch cost / plain prefill of the uncached tokens (the physical minimum; target <= 1.10)",
  );
  const rb = s2.rebuild!;
  const ru = s2.reuse!;
  emit(
    "S2",
    label,
    [
      ...STRATEGIES.map((st) => ({
        strategy: st,
        firstSwitchMs: fmt(s2[st]!.firstMs),
        firstTokens: s2[st]!.tokens.first,
        secondSwitchMs: fmt(s2[st]!.secondMs),
        secondTokens: s2[st]!.tokens.second,
        secondOverFirst: fmt(s2[st]!.secondMs / s2[st]!.firstMs, 3),
      })),
    ],
    `S2 A -> B -> A, ${sizes.s2History}-token history, 64 tokens appended under B (targets: second/first <= 0.15 and reuse/rebuild <= 0.15 under reuse)`,
  );
  const returnRatio = fmt(ru.secondMs / rb.secondMs, 3);
  if (values.json) emit("S2", label, [{ secondSwitch_reuse_over_rebuild: returnRatio }]);
  else process.stdout.write(`second switch, reuse / rebuild: ${returnRatio}\n`);
}

/** A section as a table, or with --json one line per row (`{scenario, model, ...row}`). */
function emit(scenario: string, label: string, rows: Record<string, string | number>[], title?: string) {
  if (values.json) {
    for (const row of rows) process.stdout.write(JSON.stringify({ scenario, model: label, ...row }) + "\n");
    return;
  }
  if (title) section(title);
  process.stdout.write(table(rows) + "\n");
}

async function engineBench(modelPath: string, adapters: Record<string, string>, label: string, sizes: Sizes) {
  await switchScenarios(modelPath, adapters, label, sizes);
  section(
    "S3 + S4 replayed soft trajectory (12 switches across plan/search/write, one process per run, default budgets; targets: switch time rebuild/reuse >= 3, peak RSS)",
  );
  const s3 = await trajectoryComparison(modelPath, adapters, Math.max(1, Math.min(3, reps)));
  process.stdout.write(table(s3.rows) + "\n" + table([s3.ratios]) + "\n");
  await prefixScenario(modelPath, adapters, sizes, label, false);
  await trajectoryLines(modelPath, adapters, sizes, label, false);
}

/**
 * S5: a weight set's first cache from the shared prompt prefix vs its prefill (the system prompt and function docs of
 * the trajectory).
 */
async function prefixScenario(
  modelPath: string,
  adapters: Record<string, string>,
  sizes: Sizes,
  label: string,
  json: boolean,
) {
  const figures = await withEngine(modelPath, adapters, "reuse", (engine) =>
    sharedPrefixVsPrefill(engine, openingConversation(), sizes.prefixReps),
  );
  if (json) return void process.stdout.write(JSON.stringify({ scenario: "prefix", model: label, ...figures }) + "\n");
  section(
    "S5 shared prompt prefix: a weight set's first cache restored from the saved prefix vs prefilled (target: ratio < 1)",
  );
  process.stdout.write(table([figures]) + "\n");
}

/**
 * S6 (`--scenario trajectory`): what the caller waits for on the replayed soft trajectory with scripted tool
 * latencies, per configuration of the local engine and for llama-server with per-request LoRA on the same token
 * sequences. Targets: the best configuration's critical path >= 3x below rebuild's and >= 5x below llama-server's,
 * its wall time <= 1.05x plain reuse's.
 */
async function trajectoryLines(
  modelPath: string,
  adapters: Record<string, string>,
  sizes: Sizes,
  label: string,
  json: boolean,
) {
  const modes = values.tools!.split(",").filter((m): m is "sleep" | "cpu" => m === "sleep" || m === "cpu");
  const lines = await withEngine(modelPath, adapters, "reuse", (renderer) =>
    trajectoryScenario({
      modelPath,
      adapters,
      renderer,
      threads: renderer.threads,
      switches: sizes.trajectorySwitches,
      reps: Number(values["trajectory-reps"]),
      modes,
      llamaServer: true,
    }),
  );
  const ratios = trajectoryRatios(lines);
  if (json) {
    for (const line of lines)
      process.stdout.write(
        JSON.stringify({ scenario: "trajectory", model: label, ...line } satisfies TrajectoryFigures & {
          scenario: string;
          model: string;
        }) + "\n",
      );
    for (const r of ratios)
      process.stdout.write(JSON.stringify({ scenario: "trajectory", model: label, summary: r }) + "\n");
    return;
  }
  section(
    `S6 trajectory with tool latencies (search 300 ms, read 200 ms, run_code 1 s; ${sizes.trajectorySwitches} switches): critical-path switch time per configuration`,
  );
  process.stdout.write(
    table(lines.map((l) => ({ ...l }) as Record<string, string | number>)) +
      "\n" +
      table(ratios.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v ?? "-"])))) +
      "\n",
  );
}

/** `--scenario concurrency [--model gemma-3-270m]`: the local engine and llama-server side by side, with the targets of bench/README.md. */
async function concurrencyBench() {
  const each = threads ?? availableParallelism();
  if (values.model && values.model !== "gemma-3-270m")
    throw new Error(`--scenario concurrency --model ${values.model}: only gemma-3-270m (its shipped library) is known`);
  const target = values.model
    ? gemmaTarget(await fetchModel(values.model, { logger }))
    : demoTarget(ensureDemoWeights(logger));
  await sourceBinding(); // built first when missing (about 7 minutes once): both bindings side by side in one run
  section(
    `concurrent client-driven sessions switching adapters on ${target.label} (load, turn, release, turn; 16 tokens a turn): local backend (node-llama-cpp's prebuilt and source-built binding) vs llama-server backend, ${each} thread(s) each (--threads N)`,
  );
  const { rows, targets } = await concurrencyComparison(
    target,
    mkdtempSync(join(tmpdir(), "weact-bench-")),
    [1, 4, 16],
    Number(values.rounds ?? (values.model ? 1 : 3)),
    each,
    [
      { label: "local (prebuilt)", model: { binding: "prebuilt" } },
      { label: "local (source)", model: { binding: "source" } },
    ],
  );
  process.stdout.write(table(rows) + "\n" + table(targets) + "\n");
}

/** The remote engines side by side on the real model: `--scenario remote-concurrency`. */
async function remoteConcurrencyBench() {
  const each = threads ?? availableParallelism();
  section(
    `concurrent client-driven sessions switching adapters on Gemma 3 270M with the shipped library (load, turn, release, turn; 16 tokens a turn): local, llama-server and vLLM through weact-mcp, and vLLM driven directly with the same requests; ${each} thread(s) each (--threads N)`,
  );
  const { rows, overhead } = await remoteConcurrency(
    mkdtempSync(join(tmpdir(), "weact-bench-")),
    [1, 4, 16],
    Number(values.rounds ?? 1),
    each,
  );
  process.stdout.write(table(rows) + "\n" + table(overhead) + "\n");
}

/**
 * `--scenario binding`: node-llama-cpp's prebuilt binding vs the one built here for this CPU with OpenMP
 * (scripts/node-llama-cpp-build.sh, built first when missing), each in processes of its own, on the demo model and
 * Gemma 3 270M (fetched once), at the machine's cores.
 */
async function bindingBench() {
  const each = threads ?? availableParallelism();
  const folder = await sourceBinding();
  const rounds = Number(values.rounds ?? 3);
  const demo = ensureDemoWeights(logger);
  const gemma = await configuredModel("gemma-3-270m");
  section(
    `llama.cpp's speed with node-llama-cpp's prebuilt binding vs the source build (${folder}), ${each} thread(s), one process per binding and round, medians of ${rounds} rounds; prefill: one evaluation of the prompt per sequence; decode: one token per sequence per decode, greedy`,
  );
  const { rows, ratios } = await bindingComparison(
    [
      { label: "demo (random)", path: demo.model },
      { label: "gemma-3-270m", path: gemma.modelPath },
    ],
    each,
    rounds,
  );
  if (values.json) {
    for (const row of [...rows, ...ratios])
      process.stdout.write(JSON.stringify({ scenario: "binding", ...row }) + "\n");
    return;
  }
  process.stdout.write(table(rows) + "\n" + table(ratios) + "\n");
}

async function main() {
  if (values.scenario === "concurrency") return concurrencyBench(); // before --model: it names the model the run serves
  if (values.scenario === "remote-concurrency") return remoteConcurrencyBench();
  if (values.scenario === "binding") return bindingBench();
  if (values.scenario === "invariance")
    return invarianceBench({
      model: values.model,
      rounds: values.rounds ? Number(values.rounds) : undefined,
      threads: threads ?? availableParallelism(),
      json: values.json!,
      logger,
    });
  if (values.scenario === "alora") return aloraBench();
  if (values.scenario) return scenarioOnly(values.scenario);
  if (values.model) return modelBench();
  section("search index library, on the shipped corpus (the measurement behind choosing MiniSearch)");
  process.stdout.write(table(compareIndexes(DEFAULT_CORPUS)) + "\n");
  const demo = ensureDemoWeights(logger);
  const { plan, search, write } = demo.adapters;
  await engineBench(demo.model, { plan: plan!, search: search!, write: write! }, "demo model", DEMO_SIZES);
  section(
    "MCP load_lora round trip on the warm demo model (prescribed load on a fresh session; includes the KV rebuild)",
  );
  const config = join(mkdtempSync(join(tmpdir(), "weact-bench-")), "weact.json");
  writeFileSync(config, JSON.stringify({ model: { gpu: false, demo: "random" } }));
  process.stdout.write(table(await loadLoraRoundTrip(config, 20)) + "\n");
  section(
    "external tools through MCP over HTTP (search on the shipped corpus; run_code of an empty program = sandbox overhead)",
  );
  process.stdout.write(table(await toolRoundTrips(config, 20)) + "\n");
  await concurrencyBench();
  await aloraBench();
  if (values.big) {
    if (!demoWeightsExist(PACKAGE_ROOT, true)) {
      process.stdout.write(
        "\ngenerating the Qwen3-0.6B-shaped model and rank-16/32 adapters (once; ~1.3 GB under models/big)...\n",
      );
      generateDemoWeights(PACKAGE_ROOT, { big: true });
    }
    const big = demoWeightPaths(PACKAGE_ROOT, true);
    const { code: _code, ["write-v2"]: _v2, verify: _verify, ...library } = big.adapters;
    section("memory: RSS with the model alone vs with all adapters resident (target: growth <= 1.2x the files)");
    process.stdout.write(table([await adapterMemory(big.model, library, logger)]) + "\n");
    await engineBench(big.model, library, "Qwen3-0.6B-shaped model", BIG_SIZES);
  }
}

/** One scenario on the demo model (and the 0.6B shape with --big; your files with --model). */
async function scenarioOnly(scenario: string) {
  const runs: [string, string, Record<string, string>, Sizes][] = [];
  if (values.model) {
    const { label, modelPath, adapters } = await configuredModel(values.model);
    runs.push([label, modelPath, adapters, MODEL_SIZES]);
  } else {
    const demo = ensureDemoWeights(logger);
    runs.push([
      "demo",
      demo.model,
      { plan: demo.adapters.plan!, search: demo.adapters.search!, write: demo.adapters.write! },
      DEMO_SIZES,
    ]);
    if (values.big) {
      if (!demoWeightsExist(PACKAGE_ROOT, true)) generateDemoWeights(PACKAGE_ROOT, { big: true });
      const big = demoWeightPaths(PACKAGE_ROOT, true).adapters;
      runs.push([
        "qwen3-0.6b-shape",
        demoWeightPaths(PACKAGE_ROOT, true).model,
        { plan: big.plan!, search: big.search!, write: big.write! },
        BIG_SIZES,
      ]);
    }
  }
  for (const [label, model, adapters, sizes] of runs) {
    if (scenario === "trajectory" && values.model) await modelTrajectory(label, model, adapters, sizes);
    else if (scenario === "trajectory") await trajectoryLines(model, adapters, sizes, label, values.json!);
    else if (scenario === "prefix") await prefixScenario(model, adapters, sizes, label, values.json!);
    else
      throw new Error(
        `--scenario ${scenario}: unknown; use trajectory, prefix, concurrency, remote-concurrency, binding, invariance or alora`,
      );
  }
}

/**
 * `--model NAME|PATH`: a known model's name is fetched into the cache once (`fetchModel`) and resolved to its file;
 * without `--adapters`, Gemma 3 270M gets the project's deterministic F16 test LoRAs of its shapes.
 */
async function configuredModel(arg: string) {
  let modelPath: string;
  try {
    modelPath = resolveModelArg(arg);
  } catch (err) {
    if (!(err instanceof ModelNotFetchedError)) throw err;
    modelPath = await fetchModel(arg);
  }
  if (values.adapters) return { label: arg, modelPath, adapters: parseAdapters(values.adapters) };
  if (arg !== "gemma-3-270m")
    throw new Error(`--model ${arg}: give its adapters with --adapters plan=PATH,search=PATH,write=PATH`);
  const { plan, search, write } = gemmaTestAdapters(modelPath);
  return { label: arg, modelPath, adapters: { plan, search, write } };
}

/**
 * `--model`: G3.5 (adapter memory), S1, S2 and the 12-switch trajectory (critical path and tokens for every local
 * configuration and llama-server with per-request LoRA), then on a sliding-window model the same trajectory under
 * `reuse` with a full SWA cache (`swaFullCache` true) beside the default window-sized one: RSS with the contexts and
 * the critical path.
 */
async function modelBench() {
  const { label, modelPath, adapters } = await configuredModel(values.model!);
  const sizes = MODEL_SIZES;
  if (!values.json) process.stdout.write(`\n# ${label}: ${modelPath}\nsizes ${sizes.note}\n`);
  emit(
    "G3.5",
    label,
    [await adapterMemory(modelPath, adapters, logger)],
    "G3.5 memory: RSS with the model alone vs with the adapters resident (target: growth <= 1.2x the files)",
  );
  await switchScenarios(modelPath, adapters, label, sizes);
  await modelTrajectory(label, modelPath, adapters, sizes);
}

/**
 * S3 on a configured model: the 12-switch trajectory, the full SWA cache's `reuse` run beside the others (the cheap
 * runs first; with --json each run is printed as it ends, `{scenario: "S3-run", ...}`).
 */
async function modelTrajectory(label: string, modelPath: string, adapters: Record<string, string>, sizes: Sizes) {
  const swaFull: EngineConfig = {
    strategy: "reuse/swaFullCache=true",
    cache: ENGINE_CONFIGS.find((c) => c.strategy === "reuse")!.cache,
    swaFullCache: true,
  };
  const row = (l: TrajectoryFigures) =>
    Object.fromEntries(Object.entries(l).filter(([, v]) => v !== undefined)) as Record<string, string | number>;
  const lines = await withEngine(modelPath, adapters, "reuse", (renderer) =>
    trajectoryScenario({
      modelPath,
      adapters,
      renderer,
      threads: renderer.threads,
      switches: sizes.trajectorySwitches,
      reps: 1,
      modes: ["sleep"],
      llamaServer: true,
      // the swaFullCache pair first, rebuild (the longest) last
      configs: [
        ...ENGINE_CONFIGS.filter((c) => c.strategy === "reuse"),
        swaFull,
        ...ENGINE_CONFIGS.filter((c) => c.strategy !== "reuse" && c.strategy !== "rebuild"),
        ...ENGINE_CONFIGS.filter((c) => c.strategy === "rebuild"),
      ],
      onRun: (f) => values.json && emit("S3-run", label, [row(f)]),
    }),
  );
  emit(
    "S3",
    label,
    lines.map(row),
    `S3 replayed trajectory (${sizes.trajectorySwitches} switches, tools as sleeps: search 300 ms, read 200 ms, run_code 1 s): critical path and tokens per configuration, llama-server with per-request LoRA on the same tokens`,
  );
  emit(
    "S3",
    label,
    trajectoryRatios(lines).map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v ?? "-"]))),
  );
  const window = lines.find((l) => l.strategy === "reuse")!;
  const full = lines.find((l) => l.strategy === swaFull.strategy)!;
  const kv = (l: TrajectoryFigures) => (l.rssWithContextsMB ?? NaN) - (l.rssLoadedMB ?? NaN);
  emit(
    "swaFullCache",
    label,
    [true, false].map((swaFullCache) => {
      const l = swaFullCache ? full : window;
      return {
        swaFullCache: String(swaFullCache),
        rssLoadedMB: fmt(l.rssLoadedMB ?? NaN, 1),
        rssWithContextsMB: fmt(l.rssWithContextsMB ?? NaN, 1),
        contextsMB: fmt(kv(l), 1),
        reuseCriticalPathMs: fmt(l.criticalPathMs, 1),
        reuseEvaluatedTokens: l.evaluatedTokens,
        reuseWallMs: fmt(l.wallMs, 1),
      };
    }),
    "swaFullCache true vs false under reuse on the same trajectory (RSS once the contexts exist, minus the loaded model's = the contexts: KV cache and compute buffers)",
  );
  emit("swaFullCache", label, [
    {
      contextsMB_false_over_true: fmt(kv(window) / kv(full), 3),
      criticalPath_false_over_true: fmt(window.criticalPathMs / full.criticalPathMs, 3),
      evaluatedTokens_false_over_true: fmt(window.evaluatedTokens / full.evaluatedTokens, 3),
    },
  ]);
}

/**
 * `--scenario alora`: S3 on Gemma 3 270M for the shipped LoRA and aLoRA libraries in one run (each library's own
 * load and release texts), the local engine's reuse configurations beside llama-server serving the same files, with
 * the targets.
 */
async function aloraBench() {
  const label = "gemma-3-270m";
  const modelPath = await fetchModel(label, { logger });
  const lines = await withEngine(modelPath, {}, "reuse", (renderer) =>
    aloraLibraries({
      modelPath,
      renderer,
      threads: renderer.threads,
      reps: Number(values["trajectory-reps"]),
      onRun: (f) => values.json && emit("alora-run", label, [{ ...f }]),
    }),
  );
  const columns = [
    "library",
    "strategy",
    "evaluatedTokens",
    "backgroundTokens",
    "criticalPathMs",
    "switchMs",
    "wallMs",
  ];
  const row = (l: (typeof lines)[number]) =>
    Object.fromEntries(columns.map((k) => [k, l[k as keyof typeof l] as string | number]));
  emit(
    "alora",
    label,
    lines.map(row),
    `S3 on Gemma 3 270M, LoRA library (models/gemma3) vs aLoRA library (models/gemma3-alora): 12 switches, tools as sleeps, each library's own load and release texts; the local engine's reuse configurations and llama-server with per-request LoRA on the same tokens (medians of ${values["trajectory-reps"]} rounds)`,
  );
  emit("alora", label, aloraTargets(lines), "targets");
}

function parseAdapters(list: string | undefined): Record<string, string> {
  return Object.fromEntries(
    (list ?? "")
      .split(",")
      .filter(Boolean)
      .map((kv) => kv.split("=") as [string, string]),
  );
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
