import { dirname, join } from "node:path";
import type { ResolvedConfig } from "../config/loadConfig.js";
import { DEFAULT_STAGE_BUDGET, layered } from "../budgets/budgets.js";
import type { HarnessDeps } from "../harness/runTaskUnderPolicy.js";
import { RecentRuns } from "../harness/trace/RecentRuns.js";
import type { Logger } from "../log.js";
import { PACKAGE_ROOT, PROMPTS_DIR, STATE_DIR } from "../paths.js";
import { PromptLibrary } from "../prompts/PromptLibrary.js";
import { loadEngine, startRuntime } from "./startRuntime.js";
import type { Runtime, ServerContext } from "../mcp/context.js";
import { SessionService } from "../sessions/SessionService.js";
import { Toolbox } from "../externalTools/Toolbox.js";
import { Owners } from "../mcp/owners.js";

export interface Services extends ServerContext {
  harness: HarnessDeps;
  dispose: () => Promise<void>;
}

/** The server's own files and folders: what run_code's jail must not show, wherever they live. */
export function serverPaths(config: ResolvedConfig): string[] {
  const { server, adapters, harness, cache, tools } = config;
  return [
    PACKAGE_ROOT,
    STATE_DIR,
    dirname(config.manifestPath),
    ...(adapters.allowedDirs ?? []),
    harness.traceDir,
    cache.spillDir,
    config.configFile,
    server.tokenFile,
    server.adminTokenFile,
    config.model.path,
    tools.search.corpus,
    tools.search.indexFile,
  ].filter((p): p is string => typeof p === "string");
}

/** The model, the library, the tools, the sessions and the harness: what the server, `run` and `eval` share. */
export async function startServices(
  config: ResolvedConfig,
  logger: Logger,
  options: { shared?: boolean } = {},
): Promise<Services> {
  const runtime = await startRuntime(config, logger);
  const prompts = PromptLibrary.load(PROMPTS_DIR);
  const toolbox = await Toolbox.create(config.tools, logger, { shared: options.shared, private: serverPaths(config) });
  // precedence below run arguments: the adapter's manifest entry, then the config file, then the defaults
  const stageBudget = (alias: string) =>
    layered(DEFAULT_STAGE_BUDGET, runtime.library.get(alias)?.entry.budget, config.harness.stage);
  const sessions = new SessionService(
    runtime,
    config.sessions,
    prompts.render("system") ?? "",
    () => toolbox.modelFunctions(),
    stageBudget,
  );
  const harness: HarnessDeps = {
    sessions,
    toolbox,
    library: runtime.library,
    config: config.harness,
    stageBudget,
    traceDir: traceDirOf(config),
    liveTraces: new Set(),
    recent: new RecentRuns(),
  };
  const manifestWatcher = runtime.library.watch();
  logger.info(
    {
      model: runtime.engine.model.filePath,
      adapters: runtime.library.aliases(),
      threads: runtime.engine.threads,
      demo: config.demo,
    },
    "engine ready",
  );
  return {
    runtime,
    prompts,
    toolbox,
    sessions,
    harness,
    owners: new Owners(),
    dispose: async () => {
      manifestWatcher?.close();
      await sessions.dispose();
      toolbox.close();
      await runtime.engine.dispose();
    },
  };
}

/** Where the harness writes traces (and `export` reads them by default). */
export const traceDirOf = (config: ResolvedConfig) => config.harness.traceDir ?? join(STATE_DIR, "traces");

/**
 * Only the model's tokenizer, for offline commands that count tokens (`export --stats`): the base model through the
 * engine, without adapters, tools, sessions or the manifest watcher.
 */
export async function startTokenizer(
  config: ResolvedConfig,
  logger: Logger,
): Promise<{ countTokens: (text: string) => number; dispose: () => Promise<void> }> {
  const engine = await loadEngine(config, logger);
  return { countTokens: (text) => engine.tokenize(text).length, dispose: () => engine.dispose() };
}

/**
 * What `export` writes a dataset with: the tokenizer and the functions the model read (the library's weight actions
 * and the tools' definitions), without sessions, the harness or the manifest watcher.
 */
export async function startExportServices(
  config: ResolvedConfig,
  logger: Logger,
): Promise<{ runtime: Runtime; toolbox: Toolbox; dispose: () => Promise<void> }> {
  const runtime = await startRuntime(config, logger);
  try {
    const toolbox = await Toolbox.create(config.tools, logger, { private: serverPaths(config) });
    return {
      runtime,
      toolbox,
      dispose: async () => {
        toolbox.close();
        await runtime.engine.dispose();
      },
    };
  } catch (err) {
    await runtime.engine.dispose();
    throw err;
  }
}
