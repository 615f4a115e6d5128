import { join } from "node:path";
import type { ResolvedConfig } from "../config/config.js";
import { DEFAULT_STAGE_BUDGET, layered } from "../budgets/budgets.js";
import type { HarnessDeps } from "../harness/runTask.js";
import type { Logger } from "../log.js";
import { PROMPTS_DIR, STATE_DIR } from "../paths.js";
import { PromptLibrary } from "../prompts/PromptLibrary.js";
import { startRuntime } from "../runtime/startRuntime.js";
import type { ServerContext } from "../server/context.js";
import { SessionService } from "../sessions/SessionService.js";
import { Toolbox } from "../tools/Toolbox.js";

export interface Services extends ServerContext {
  harness: HarnessDeps;
  dispose: () => Promise<void>;
}

/** The model, the library, the tools, the sessions and the harness: what the server, `run` and `eval` share. */
export async function startServices(config: ResolvedConfig, logger: Logger): Promise<Services> {
  const runtime = await startRuntime(config, logger);
  const prompts = PromptLibrary.load(PROMPTS_DIR);
  const toolbox = await Toolbox.create(config.tools, logger);
  // precedence below run arguments: the adapter's manifest entry, then the config file, then the defaults
  const stageBudget = (alias: string) => layered(DEFAULT_STAGE_BUDGET, runtime.library.get(alias)?.entry.budget, config.harness.stage);
  const sessions = new SessionService(runtime, config.sessions, prompts.render("system") ?? "", () => toolbox.modelFunctions(), stageBudget);
  const harness: HarnessDeps = { sessions, toolbox, library: runtime.library, config: config.harness, stageBudget, traceDir: config.harness.traceDir ?? join(STATE_DIR, "traces") };
  const manifestWatcher = runtime.library.watch(config.manifestPath);
  logger.info({ model: runtime.engine.model.filePath, adapters: runtime.library.aliases(), threads: runtime.engine.threads, demo: config.demo }, "engine ready");
  return {
    runtime,
    prompts,
    toolbox,
    sessions,
    harness,
    dispose: async () => {
      manifestWatcher?.close();
      await sessions.dispose();
      toolbox.close();
      await runtime.engine.dispose();
    },
  };
}
