import { join } from "node:path";
import { modelCacheDir } from "./cacheDir.js";
import { isKnownModel, knownModel } from "./catalog.js";
import { ModelNotFetchedError } from "./errors.js";
import { isVerified } from "./verify.js";

/**
 * What `--model` and `doctor` take: a known model's name (`gemma-3-270m`) becomes its verified file in the cache
 * (`dir` as `--dir`, else the default); anything else is a path and comes back unchanged. Synchronous and cheap: it
 * trusts the marker `fetch-model` wrote and reads no model bytes. Throws `ModelNotFetchedError`, which says to run
 * `weact-mcp fetch-model NAME`, when the name's file is missing or not verified.
 */
export function resolveModelArg(nameOrPath: string, dir?: string): string {
  if (!isKnownModel(nameOrPath)) return nameOrPath;
  const spec = knownModel(nameOrPath);
  const file = join(modelCacheDir(dir), spec.fileName);
  if (!isVerified(file, spec)) throw new ModelNotFetchedError(spec.name, file);
  return file;
}
