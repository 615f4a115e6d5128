import { createServer } from "node:net";
import type { ResolvedConfig } from "../config/loadConfig.js";
import type { Logger } from "../log.js";
import { serveHttp } from "../composition/httpApp.js";
import { serveStdio } from "../transports/stdio.js";
import { startServices } from "../composition/services.js";

export type ServeMode = { kind: "stdio" } | { kind: "http"; host: string; port: number };

function connectionHelp(url: string): string {
  const entry = JSON.stringify({ mcpServers: { "weact-mcp": { type: "http", url: `${url}/mcp` } } });
  return [
    `weact-mcp listening on ${url}`,
    `  Streamable HTTP:  ${url}/mcp`,
    `  legacy HTTP+SSE:  ${url}/sse`,
    `  OpenAI API:       ${url}/v1  (models: GET ${url}/v1/models)`,
    `  status page:      ${url}/status`,
    `  mcp.json entry:   ${entry}`,
    `  MCP Inspector:    npx @modelcontextprotocol/inspector  -> transport "Streamable HTTP", URL ${url}/mcp`,
    `  stdio instead:    weact-mcp client-config [--client claude-desktop|claude-code|cursor]   (a ready entry with absolute paths)`,
    "",
  ].join("\n");
}

/** Loads the model and library, serves MCP on the chosen transport, and shuts down cleanly on a signal. */
export async function serve(config: ResolvedConfig, mode: ServeMode, logger: Logger): Promise<void> {
  const services = await startServices(config, logger, {
    shared: mode.kind === "http" && Boolean(config.server.tokenFile),
  });
  let closeTransport: () => Promise<void>;
  if (mode.kind === "stdio") {
    const stdio = await serveStdio(services);
    closeTransport = stdio.close;
    void stdio.closed.then(() => shutdown("stdin closed"));
  } else {
    const {
      allowedHosts,
      tokenFile,
      adminTokenFile,
      maxBodyBytes,
      maxConnections,
      maxConnectionsPerClient,
      connectionIdleSeconds,
      streamKeepaliveSeconds,
      maxStatusLogins,
      maxStatusLoginsPerClient,
    } = config.server;
    const http = await serveHttp(
      services,
      {
        host: mode.host,
        port: mode.port,
        allowedHosts,
        tokenFile,
        adminTokenFile,
        maxBodyBytes,
        maxConnections,
        maxConnectionsPerClient,
        idleSeconds: connectionIdleSeconds,
        keepaliveSeconds: streamKeepaliveSeconds,
        statusLogins: { max: maxStatusLogins, maxPerClient: maxStatusLoginsPerClient },
        continuationSeconds: config.openai.continuationSeconds,
      },
      logger,
    );
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
      await services.dispose();
    } finally {
      process.exit(0);
    }
  }
  process.on("SIGINT", () => void shutdown("SIGINT"));
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
}

/** Fails with a plain message when `port` is taken on `host` (checked before the model loads). */
export async function assertPortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  await new Promise<void>((resolve, reject) => {
    const probe = createServer();
    probe.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          err.code === "EADDRINUSE"
            ? `port ${port} on ${host} is already in use (EADDRINUSE): stop what holds it, or choose another port with --http PORT or server.port`
            : `cannot listen on ${host}:${port}: ${err.message}`,
        ),
      ),
    );
    probe.listen(port, host, () => probe.close(() => resolve()));
  });
}
