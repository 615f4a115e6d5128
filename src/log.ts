import pino, { type Logger } from "pino";

/** All logs go to stderr: stdout belongs to the stdio transport. */
export function createLogger(level: string = process.env.WEACT_LOG_LEVEL ?? "info"): Logger {
  return pino({ level, base: { service: "weact-mcp" } }, pino.destination({ fd: 2, sync: true }));
}

export type { Logger };
