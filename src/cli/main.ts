#!/usr/bin/env node
import { existsSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import {
  checkRemoteEngine,
  ConfigError,
  loadConfigFile,
  resolveConfig,
  type ResolvedConfig,
} from "../config/loadConfig.js";
import { RemoteEngineConfigSchema } from "../config/configSchema.js";
import { describeIssues } from "../library/manifest.js";
import { generateDemoWeights } from "../demo/demoWeights.js";
import { createLogger } from "../log.js";
import { fetchModel, MODELS, resolveModelArg } from "../modelFiles/index.js";
import { PACKAGE_ROOT } from "../paths.js";
import { clientConfig, CLIENTS, type ClientKind } from "./clientConfig.js";
import {
  evalCommand,
  exportCommand,
  generateFamilySets,
  importPeftCommand,
  runCommand,
  UsageError,
} from "./commands.js";
import { doctor, formatChecks } from "./doctor.js";
import { libraryConfigFile } from "./libraryFlag.js";
import { mergeCommand } from "./merge.js";
import { assertPortFree, serve } from "./serve.js";

const HELP = `weact-mcp: serve one GGUF base model with switchable LoRA capability adapters over MCP

Usage:
  weact-mcp [--stdio | --http PORT] [--host H] [--token-file F] [--config F | --library L] [--model PATH]
            [--adapters PATH]
  weact-mcp run "TASK" [--policy P] [--workflow a,b,c] [--seed N]
                                      solve one task in-process; the answer on stdout
  weact-mcp eval TASKS.jsonl [--policy hard,soft,static,static:METHOD,base,single:ALIAS] [--workflow a,b,c]
                 [--out DIR] [--seed N]
                                      every task under each policy (default: base, single:<each adapter>,
                                      static, static:<each merge's method>, hard, soft; --workflow: hard's
                                      stages): table with the weights' SHA-256, report.json, chart.svg
  weact-mcp import-peft DIR --alias A --description D [--scale S]
                                      convert a PEFT LoRA folder to GGUF and add it to the manifest
  weact-mcp merge --method linear|ties|dare-ties --out F.gguf [--of a,b,c] [--weights w1,w2,...]
                  [--density D] [--seed N] [--alias A]
                                      merge the library's adapters into one GGUF LoRA as PEFT's
                                      add_weighted_adapter does (--of: default every adapter but merges
                                      and aLoRAs, in manifest order; --weights in that order, default 1
                                      each: the adapters' full updates; --density: ties 0.2, dare-ties
                                      0.5; --seed: dare-ties, 0) and add it to the manifest as A (default
                                      static-METHOD), which policy static:METHOD runs (docs/models.md)
  weact-mcp export --capability ALIAS [--format axolotl|openai|trl] [--out F] [--from DIR] [--filter all|correct|IDS]
  weact-mcp export --stats [--capability ALIAS] [--from DIR] [--filter F]
                                      training data for one capability from recorded traces; --stats: sizes
  weact-mcp fetch-model NAME [--dir D]
                                      download and verify a known real model into the cache: gemma-3-270m,
                                      qwen2.5-coder-0.5b-instruct, smollm2-135m-instruct (docs/models.md);
                                      its path on stdout
  weact-mcp doctor MODEL.gguf|NAME [--adapters MANIFEST] [--json]
                                      will this set serve? a verdict per check; exit 0 when it will
  weact-mcp demo-weights [--seed N] [--big]    (re)generate the demo model and adapters
  weact-mcp demo-weights --family NAME|all [--quant F16|Q8_0|Q4_0|all] [--seed N]
                                      a model family's demo set (real chat template); one JSON line per set
  weact-mcp client-config [--client claude-desktop|claude-code|cursor] [--config F]
                                      a ready client entry (absolute paths) that starts this server over stdio

Serving (default: HTTP on 127.0.0.1:7331, Streamable HTTP at /mcp and legacy SSE at /sse):
  --stdio            serve one client over stdin/stdout (what MCP clients spawn)
  --http PORT        serve HTTP on PORT (0 = any free port)
  --host H           bind address (default 127.0.0.1; anything else requires --token-file)
  --token-file F     bearer tokens, one per line as "name:token"; clients send "Authorization: Bearer <token>"

Model and library:
  --config FILE      JSON config file (docs/configuration.md); flags override it
  --library NAME|DIR a library folder's config.json: a shipped one (gemma3: Gemma 3 270M with trained plan,
                     search and write adapters, after fetch-model gemma-3-270m; qwen: the same for the taught
                     Qwen backbone, after fetch-model qwen2.5-coder-0.5b-weact) or a folder of yours
  --model PATH       GGUF base model, or a fetched model's name (gemma-3-270m, ...) (default: the trained demo
                     library, models/trained)
  --adapters PATH    adapter manifest, or a folder holding manifest.json

Serving engine (default: llama.cpp in this process; docs/remote-engines.md):
  --engine-url URL         a serving engine to run the model instead (engine.remote.url)
  --engine-flavor FLAVOR   llama-server, vllm or sglang (engine.remote.flavor)
  --engine-model NAME      the served base model's name (engine.remote.model; vLLM, SGLang)
  -h, --help         this text
`;

function fail(message: string): never {
  process.stderr.write(`weact-mcp: ${message}\n`);
  process.exit(2);
}

type ConfigFlags = {
  config?: string;
  library?: string;
  model?: string;
  adapters?: string;
  host?: string;
  "token-file"?: string;
  "engine-url"?: string;
  "engine-flavor"?: string;
  "engine-model"?: string;
};

/** --engine-url/--engine-flavor/--engine-model over engine.remote: a remote backend, checked like the file's. */
function engineFrom(values: ConfigFlags, base: ResolvedConfig): ResolvedConfig["engine"] | undefined {
  if (
    values["engine-url"] === undefined &&
    values["engine-flavor"] === undefined &&
    values["engine-model"] === undefined
  )
    return undefined;
  const given = {
    ...base.engine.remote,
    ...(values["engine-url"] ? { url: values["engine-url"] } : {}),
    ...(values["engine-flavor"] ? { flavor: values["engine-flavor"] } : {}),
    ...(values["engine-model"] ? { model: values["engine-model"] } : {}),
  };
  const parsed = RemoteEngineConfigSchema.safeParse(given);
  const flag = (issue: string) =>
    issue.replace(/^(url|flavor|model):/, (_m, f: string) => `--engine-${f} (engine.remote.${f}):`);
  if (!parsed.success) throw new ConfigError("command line", describeIssues(parsed.error).map(flag));
  const engine = { backend: "remote" as const, remote: parsed.data };
  checkRemoteEngine({ ...base, engine }, "command line", process.cwd());
  return engine;
}

function configFrom(values: ConfigFlags): ResolvedConfig {
  if (values.config && values.library) throw new UsageError("--config and --library both name a config file: give one");
  const file = values.library ? libraryConfigFile(values.library) : values.config;
  const base = file ? loadConfigFile(file) : resolveConfig({}, "defaults", process.cwd());
  const overrides: Partial<ResolvedConfig> = {};
  if (values.model) overrides.model = { ...base.model, path: resolve(resolveModelArg(values.model)) };
  if (values.adapters) {
    const p = resolve(values.adapters);
    overrides.manifestPath = existsSync(p) && statSync(p).isDirectory() ? join(p, "manifest.json") : p;
  }
  const server = {
    ...base.server,
    ...(values.host ? { host: values.host } : {}),
    ...(values["token-file"] ? { tokenFile: resolve(values["token-file"]) } : {}),
  };
  const engine = engineFrom(values, base) ?? base.engine;
  return { ...base, ...overrides, engine, server, demo: overrides.model ? false : base.demo };
}

async function main(argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      config: { type: "string" },
      library: { type: "string" },
      model: { type: "string" },
      adapters: { type: "string" },
      stdio: { type: "boolean" },
      http: { type: "string" },
      host: { type: "string" },
      "token-file": { type: "string" },
      "engine-url": { type: "string" },
      "engine-flavor": { type: "string" },
      "engine-model": { type: "string" },
      seed: { type: "string" },
      policy: { type: "string" },
      workflow: { type: "string" },
      out: { type: "string" },
      alias: { type: "string" },
      capability: { type: "string" },
      from: { type: "string" },
      filter: { type: "string" },
      format: { type: "string" },
      stats: { type: "boolean" },
      description: { type: "string" },
      scale: { type: "string" },
      big: { type: "boolean" },
      family: { type: "string" },
      quant: { type: "string" },
      json: { type: "boolean" },
      client: { type: "string" },
      dir: { type: "string" },
      method: { type: "string" },
      density: { type: "string" },
      weights: { type: "string" },
      of: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const logger = createLogger();
  const command = positionals[0];
  const seed = values.seed === undefined ? undefined : Number(values.seed);
  if (seed !== undefined && !Number.isInteger(seed)) fail("--seed takes an integer");
  if (command === "run" || command === "eval" || command === "import-peft") {
    const arg = positionals[1];
    if (!arg)
      fail(
        command === "run"
          ? 'run needs the task: weact-mcp run "..."'
          : command === "eval"
            ? "eval needs a JSONL task file"
            : "import-peft needs the PEFT folder",
      );
    try {
      if (command === "run")
        await runCommand(configFrom(values), logger, arg, { policy: values.policy, workflow: values.workflow, seed });
      else if (command === "eval")
        await evalCommand(configFrom(values), logger, arg, {
          policy: values.policy,
          workflow: values.workflow,
          out: values.out,
          seed,
        });
      else
        await importPeftCommand(configFrom(values), logger, arg, {
          alias: values.alias,
          description: values.description,
          scale: values.scale === undefined ? undefined : Number(values.scale),
        });
    } catch (err) {
      if (err instanceof UsageError) fail(err.message);
      throw err;
    }
    return;
  }
  if (command === "merge") {
    try {
      await mergeCommand(configFrom(values), {
        method: values.method,
        density: values.density,
        weights: values.weights,
        seed,
        of: values.of,
        out: values.out,
        alias: values.alias,
      });
    } catch (err) {
      if (err instanceof UsageError) fail(err.message);
      throw err;
    }
    return;
  }
  if (command === "export") {
    await exportCommand(configFrom(values), logger, {
      capability: values.capability,
      from: values.from,
      filter: values.filter,
      format: values.format,
      out: values.out,
      stats: values.stats,
    });
    return;
  }
  if (command === "doctor") {
    const model = positionals[1];
    if (!model) fail("doctor needs the model: weact-mcp doctor MODEL.gguf [--adapters MANIFEST]");
    const config = configFrom(values);
    const checks = await doctor(
      resolve(resolveModelArg(model)),
      values.adapters ? config.manifestPath : undefined,
      config,
    );
    const serves = checks.every((c) => c.ok);
    process.stdout.write(
      values.json
        ? `${JSON.stringify({ serves, checks })}\n`
        : `${formatChecks(checks)}\n${serves ? "this set will serve" : "this set will NOT serve: fix the FAIL lines"}\n`,
    );
    process.exitCode = serves ? 0 : 1;
    return;
  }
  if (command === "fetch-model") {
    const name = positionals[1];
    if (!name)
      fail(`fetch-model needs the model's name: weact-mcp fetch-model ${Object.keys(MODELS).join("|")} [--dir D]`);
    process.stdout.write(`${await fetchModel(name, { dir: values.dir, logger })}\n`);
    return;
  }
  if (command === "demo-weights" && values.family !== undefined) {
    try {
      for (const set of generateFamilySets(PACKAGE_ROOT, values.family, values.quant ?? "F16", seed))
        process.stdout.write(`${JSON.stringify(set)}\n`);
    } catch (err) {
      if (err instanceof UsageError) fail(err.message);
      throw err;
    }
    return;
  }
  if (command === "client-config") {
    const client = (values.client ?? "claude-desktop") as ClientKind;
    if (!CLIENTS.includes(client)) fail(`--client: "${client}" is not one of ${CLIENTS.join(", ")}`);
    const out = clientConfig(
      client,
      values.library ? libraryConfigFile(values.library) : values.config && resolve(values.config),
    );
    process.stderr.write(`${out.hint}:\n`);
    process.stdout.write(out.text);
    return;
  }
  if (command === "demo-weights") {
    const paths = generateDemoWeights(PACKAGE_ROOT, { seed, big: values.big });
    logger.info(paths, "demo weights written");
    return;
  }
  if (command !== undefined) fail(`unknown command "${command}" (see --help)`);

  if (values.stdio && values.http !== undefined) fail("choose one of --stdio and --http");
  const config = configFrom(values);
  const port = values.http === undefined ? config.server.port : Number(values.http);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail("--http takes a port number (0-65535)");
  // before the model loads: a taken port is reported in a second, not after the load
  if (!values.stdio) await assertPortFree(config.server.host, port).catch((err: Error) => fail(err.message));
  await serve(config, values.stdio ? { kind: "stdio" } : { kind: "http", host: config.server.host, port }, logger);
}

main(process.argv.slice(2)).catch((err: Error) => fail(err.message));
