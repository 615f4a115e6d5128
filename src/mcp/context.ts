import type { ResolvedConfig } from "../config/loadConfig.js";
import type { Engine } from "../engine/index.js";
import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import type { Logger } from "../log.js";
import type { PromptLibrary } from "../prompts/PromptLibrary.js";
import type { SessionService } from "../sessions/SessionService.js";
import type { Toolbox } from "../externalTools/Toolbox.js";
import type { HarnessDeps } from "../harness/runTaskUnderPolicy.js";

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
}

/** Request metadata the SDK passes to handlers, as far as ownership needs it. */
export interface RequestIdentity {
  authInfo?: { clientId: string };
  sessionId?: string;
}

/**
 * Who owns what a request creates: the bearer-token identity when auth is on, else the MCP transport
 * session (so two connections never see each other's sessions), else the single stdio client.
 */
export function ownerOf(extra: RequestIdentity): string {
  if (extra.authInfo?.clientId) return `token:${extra.authInfo.clientId}`;
  if (extra.sessionId) return `connection:${extra.sessionId}`;
  return "stdio";
}
