import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { PACKAGE_ROOT } from "../paths.js";
import { UsageError } from "./commands.js";

const SHIPPED = join(PACKAGE_ROOT, "models");
const CONFIG_FILE = "config.json";

/** The shipped libraries that `--library NAME` serves: the folders of models/ with a config.json. */
export function shippedLibraries(): string[] {
  return readdirSync(SHIPPED, { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(SHIPPED, d.name, CONFIG_FILE)))
    .map((d) => d.name)
    .sort();
}

/**
 * `--library NAME|DIR`: the config file of a library folder (a shipped one, models/NAME, or any folder), which names
 * its base model and manifest: `--library gemma3` is `--config models/gemma3/config.json`.
 */
export function libraryConfigFile(nameOrDir: string): string {
  const shipped = join(SHIPPED, nameOrDir, CONFIG_FILE);
  if (/^[a-z0-9][a-z0-9_-]*$/.test(nameOrDir) && existsSync(shipped)) return shipped;
  const file = join(resolve(nameOrDir), CONFIG_FILE);
  if (existsSync(file)) return file;
  throw new UsageError(
    `--library: "${nameOrDir}" is neither a shipped library (${shippedLibraries().join(", ") || "none"}) nor a folder with a ${CONFIG_FILE}`,
  );
}
