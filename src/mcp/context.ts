import type { ResolvedConfig } from "../config/loadConfig.js";
import type { Engine } from "../engine/index.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { Logger } from "../log.js";
import type { PromptLibrary } from "../prompts/PromptLibrary.js";
import type { SessionService } from "../sessions/SessionService.js";
import type { Toolbox } from "../externalTools/Toolbox.js";
import type { HarnessDeps } from "../harness/runTaskUnderPolicy.js";
import type { Owners } from "./owners.js";

/**
 * The running server as the MCP surface reads it: the resolved config, the engine, the adapter library, the logger
 * (src/composition/startRuntime.ts starts one).
 */
export interface Runtime {
  config: ResolvedConfig;
  engine: Engine;
  library: AdapterLibrary;
  logger: Logger;
}

/** What every MCP server object (one per client connection) shares. */
export interface ServerContext {
  runtime: Runtime;
  sessions: SessionService;
  prompts: PromptLibrary;
  toolbox: Toolbox;
  harness: HarnessDeps;
  owners: Owners;
}
