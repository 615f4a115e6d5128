import { homedir } from "node:os";
import { join, resolve } from "node:path";

/** Where fetched models live: `dir` (`--dir`) for one run, else `$WEACT_MODEL_CACHE`, else ~/.cache/weact-mcp/models. */
export function modelCacheDir(dir?: string): string {
  if (dir) return resolve(dir);
  const fromEnv = process.env.WEACT_MODEL_CACHE;
  return fromEnv ? resolve(fromEnv) : join(homedir(), ".cache", "weact-mcp", "models");
}
