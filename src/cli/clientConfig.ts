import { join } from "node:path";
import { PACKAGE_ROOT } from "../paths.js";

export const CLIENTS = ["claude-desktop", "claude-code", "cursor"] as const;
export type ClientKind = (typeof CLIENTS)[number];

/**
 * A ready MCP client entry that starts this server over stdio with absolute paths (node and main.js), so the
 * client may start it from any folder: `text` for stdout (JSON for Claude Desktop and Cursor, a command line
 * for Claude Code), `hint` (where it goes) for stderr.
 */
export function clientConfig(client: ClientKind, configFile?: string): { text: string; hint: string } {
  const args = [
    join(PACKAGE_ROOT, "dist", "src", "cli", "main.js"),
    "--stdio",
    ...(configFile ? ["--config", configFile] : []),
  ];
  if (client === "claude-code")
    return {
      text: `claude mcp add weact-mcp --env WEACT_LOG_LEVEL=warn -- ${[process.execPath, ...args].map(quote).join(" ")}\n`,
      hint: "run this command (add --scope user to use it in every project)",
    };
  const entry = { mcpServers: { "weact-mcp": { command: process.execPath, args, env: { WEACT_LOG_LEVEL: "warn" } } } };
  const hint =
    client === "cursor"
      ? "merge into ~/.cursor/mcp.json (or .cursor/mcp.json in a project)"
      : "merge into claude_desktop_config.json (Settings > Developer > Edit Config), then restart Claude Desktop";
  return { text: `${JSON.stringify(entry, null, 2)}\n`, hint };
}

const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`);
