import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { describeIssues } from "../library/manifest.js";
import { DEFAULT_MANIFEST, TRAINED_MANIFEST, TRAINED_MODEL } from "../paths.js";
import { ModelNotFetchedError, resolveModelArg } from "../modelFiles/index.js";
import { ConfigSchema, type Config } from "./configSchema.js";

// A config file read and resolved: validated against configSchema.ts, its relative paths against the file's folder, a
// model's name to its fetched file, the remote engine checked complete for its flavor.

export class ConfigError extends Error {
  constructor(
    readonly source: string,
    readonly issues: readonly string[],
    what = "is invalid",
  ) {
    super(`configuration ${source} ${what}: ${issues.join("; ")}`);
    this.name = "ConfigError";
  }
}

export interface ResolvedConfig extends Config {
  /** Absolute path of the manifest in use. */
  manifestPath: string;
  /** True when no model was configured and the generated demo model is served. */
  demo: boolean;
  /** The config file read, if any (hidden from run_code's jail). */
  configFile?: string;
}

/** model.path: a known model's name is its fetched file (as --model takes it); anything else a path. */
function modelPath(path: string, source: string, baseDir: string): string {
  try {
    return resolve(baseDir, resolveModelArg(path));
  } catch (err) {
    if (err instanceof ModelNotFetchedError) throw new ConfigError(source, [`model.path: ${err.message}`]);
    throw err;
  }
}

/** The folders adapter files may come from: adapters.allowedDirs, else the manifest's folder. */
export const adapterDirs = (config: ResolvedConfig): string[] =>
  config.adapters.allowedDirs ?? [dirname(config.manifestPath)];

/** Validates a config object; relative paths resolve against `baseDir` (the config file's folder). */
export function resolveConfig(input: unknown, source: string, baseDir: string): ResolvedConfig {
  const parsed = ConfigSchema.safeParse(input ?? {});
  if (!parsed.success) throw new ConfigError(source, describeIssues(parsed.error));
  const config = parsed.data;
  if (config.model.path) config.model.path = modelPath(config.model.path, source, baseDir);
  if (config.server.tokenFile) config.server.tokenFile = resolve(baseDir, config.server.tokenFile);
  if (config.server.adminTokenFile) config.server.adminTokenFile = resolve(baseDir, config.server.adminTokenFile);
  if (config.adapters.allowedDirs)
    config.adapters.allowedDirs = config.adapters.allowedDirs.map((d) => resolve(baseDir, d));
  if (config.harness.traceDir) config.harness.traceDir = resolve(baseDir, config.harness.traceDir);
  if (config.cache.spillDir) config.cache.spillDir = resolve(baseDir, config.cache.spillDir);
  const search = config.tools.search;
  if (search.corpus) search.corpus = resolve(baseDir, search.corpus);
  if (search.indexFile) search.indexFile = resolve(baseDir, search.indexFile);
  if (search.backend === "searxng" && !search.searxng)
    throw new ConfigError(source, ['tools.search.searxng.url: required when tools.search.backend is "searxng"']);
  checkRemoteEngine(config, source, baseDir);
  const demo = !config.model.path;
  const trained = demo && config.model.demo === "trained";
  if (trained) {
    if (!existsSync(TRAINED_MODEL))
      throw new ConfigError(source, [
        `model.demo: the trained demo model ${TRAINED_MODEL} is missing (make it with npm run train-demo, or set model.demo to "random" or model.path to your GGUF)`,
      ]);
    config.model.path = TRAINED_MODEL;
  }
  return {
    ...config,
    manifestPath: config.adapters.manifest
      ? resolve(baseDir, config.adapters.manifest)
      : trained
        ? TRAINED_MANIFEST
        : DEFAULT_MANIFEST,
    demo,
  };
}

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);
/** Where PEFT folders go for an engine on this machine (a loopback engine.remote.url) when adapterDir is not set. */
export const LOOPBACK_ADAPTER_DIR = join(homedir(), ".cache", "weact-mcp", "remote-adapters");

/** engine.remote is complete for its flavor; its local paths resolve against the config file's folder. */
export function checkRemoteEngine(config: Config, source: string, baseDir: string): void {
  const { backend, remote } = config.engine;
  if (backend !== "remote") return;
  if (!remote)
    throw new ConfigError(source, [
      'engine.remote: required when engine.backend is "remote" (url and flavor at least; or --engine-url and --engine-flavor)',
    ]);
  if (remote.flavor !== "llama-server" && !remote.adapterDir) {
    // an engine on this machine reads this machine's files; the folders are content-addressed, so servers may share one
    if (LOOPBACK_HOSTS.has(new URL(remote.url).hostname)) remote.adapterDir = LOOPBACK_ADAPTER_DIR;
    else
      throw new ConfigError(source, [
        `engine.remote.adapterDir: required for ${remote.flavor} off this machine, which loads PEFT folders: a folder both this server and the engine can read (README "Remote engines")`,
      ]);
  }
  if (remote.localAdapterDir) remote.localAdapterDir = resolve(baseDir, remote.localAdapterDir);
  else if (remote.adapterDir) remote.adapterDir = resolve(baseDir, remote.adapterDir);
  if (remote.apiKeyEnv && !process.env[remote.apiKeyEnv])
    throw new ConfigError(source, [`engine.remote.apiKeyEnv: the environment variable ${remote.apiKeyEnv} is not set`]);
}

export function loadConfigFile(file: string): ResolvedConfig {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    if (missing)
      throw new ConfigError(
        file,
        [`no such file (${resolve(file)}); create it (README "Configuration") or drop --config to use the defaults`],
        "is missing",
      );
    throw new ConfigError(file, [`cannot read it: ${(err as Error).message}`], "is unreadable");
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(file, [`cannot read it as JSON: ${(err as Error).message}`]);
  }
  return { ...resolveConfig(raw, file, dirname(resolve(file))), configFile: resolve(file) };
}
