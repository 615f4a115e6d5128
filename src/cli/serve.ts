import type { ResolvedConfig } from "../config/config.js";
import type { Logger } from "../log.js";
import { PROMPTS_DIR } from "../paths.js";
import { PromptLibrary } from "../prompts/PromptLibrary.js";
import { startRuntime } from "../runtime/startRuntime.js";
import type { ServerContext } from "../server/context.js";
import { SessionService } from "../sessions/SessionService.js";
import { Toolbox } from "../tools/Toolbox.js";
import { serveHttp } from "../transports/http.js";
import { serveStdio } from "../transports/stdio.js";

export type ServeMode = { kind: "stdio" } | { kind: "http"; host: string; port: number };

function connectionHelp(url: string): string {
  const entry = JSON.stringify({ mcpServers: { "weact-mcp": { type: "http", url: `${url}/mcp` } } });
  return [
    `weact-mcp listening on ${url}`,
    `  Streamable HTTP:  ${url}/mcp`,
    `  legacy HTTP+SSE:  ${url}/sse`,
    `  mcp.json entry:   ${entry}`,
    `  MCP Inspector:    npx @modelcontextprotocol/inspector  -> transport "Streamable HTTP", URL ${url}/mcp`,
    `  stdio instead:    node dist/src/cli/main.js --stdio   (see mcp.json)`,
    "",
  ].join("\n");
}

/** Loads the model and library, serves MCP on the chosen transport, and shuts down cleanly on a signal. */
export async function serve(config: ResolvedConfig, mode: ServeMode, logger: Logger): Promise<void> {
  const runtime = await startRuntime(config, logger);
  const prompts = PromptLibrary.load(PROMPTS_DIR);
  const toolbox = await Toolbox.create(config.tools, logger);
  const sessions = new SessionService(runtime, config.sessions, prompts.render("system") ?? "", () => toolbox.modelFunctions());
  const ctx: ServerContext = { runtime, sessions, prompts, toolbox };
  logger.info({ model: runtime.engine.model.filePath, adapters: runtime.library.aliases(), threads: runtime.engine.threads, demo: config.demo }, "engine ready");

  let closeTransport: () => Promise<void>;
  if (mode.kind === "stdio") {
    const stdio = await serveStdio(ctx);
    closeTransport = stdio.close;
    void stdio.closed.then(() => shutdown("stdin closed"));
  } else {
    const http = await serveHttp(ctx, { host: mode.host, port: mode.port, allowedHosts: config.server.allowedHosts, tokenFile: config.server.tokenFile }, logger);
    closeTransport = http.close;
    process.stderr.write(connectionHelp(http.url));
  }

  let stopping = false;
  async function shutdown(reason: string) {
    if (stopping) {
      logger.warn("second signal: exiting now");
      process.exit(1);
    }
    stopping = true;
    logger.info({ reason }, "shutting down");
    try {
      await closeTransport();
      await sessions.dispose();
      toolbox.close();
      await runtime.engine.dispose();
    } finally {
      process.exit(0);
    }
  }
  process.on("SIGINT", () => void shutdown("SIGINT"));
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
}
