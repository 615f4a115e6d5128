#!/usr/bin/env node
import { existsSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadConfigFile, resolveConfig, type ResolvedConfig } from "../config/config.js";
import { generateDemoWeights } from "../demo/generate.js";
import { createLogger } from "../log.js";
import { PACKAGE_ROOT } from "../paths.js";
import { startRuntime } from "../runtime/startRuntime.js";

const HELP = `weact-mcp: serve one GGUF base model with switchable LoRA capability adapters over MCP

Usage:
  weact-mcp [options]                  load the model and adapters, then serve
  weact-mcp demo-weights [--seed N] [--big]
                                       (re)generate the demo model and adapters

Options:
  --config FILE      JSON config file (see README "Configuration")
  --model PATH       GGUF base model (default: the generated demo model)
  --adapters PATH    adapter manifest, or a folder holding manifest.json
  -h, --help         this text
`;

function fail(message: string): never {
  process.stderr.write(`weact-mcp: ${message}\n`);
  process.exit(2);
}

function configFrom(values: { config?: string; model?: string; adapters?: string }): ResolvedConfig {
  const base = values.config ? loadConfigFile(values.config) : resolveConfig({}, "defaults", process.cwd());
  const overrides: Partial<ResolvedConfig> = {};
  if (values.model) overrides.model = { ...base.model, path: resolve(values.model) };
  if (values.adapters) {
    const p = resolve(values.adapters);
    overrides.manifestPath = existsSync(p) && statSync(p).isDirectory() ? join(p, "manifest.json") : p;
  }
  return { ...base, ...overrides, demo: !(overrides.model?.path ?? base.model.path) };
}

async function main(argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      config: { type: "string" },
      model: { type: "string" },
      adapters: { type: "string" },
      seed: { type: "string" },
      big: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const logger = createLogger();
  const command = positionals[0];
  if (command === "demo-weights") {
    const seed = values.seed === undefined ? undefined : Number(values.seed);
    if (seed !== undefined && !Number.isInteger(seed)) fail("--seed takes an integer");
    const paths = generateDemoWeights(PACKAGE_ROOT, { seed, big: values.big });
    logger.info(paths, "demo weights written");
    return;
  }
  if (command !== undefined) fail(`unknown command "${command}" (see --help)`);

  const runtime = await startRuntime(configFrom(values), logger);
  logger.info(
    { model: runtime.engine.model.filePath, adapters: runtime.library.aliases(), threads: runtime.engine.threads },
    "weact-mcp engine ready",
  );
  const stop = async () => {
    await runtime.engine.dispose();
    process.exit(0);
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

main(process.argv.slice(2)).catch((err: Error) => fail(err.message));
