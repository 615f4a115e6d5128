import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Llama, type LlamaLogLevel } from "node-llama-cpp";

/**
 * Starting llama.cpp from a binding kept outside node_modules needs node-llama-cpp 3.21.1's private `Llama._create`:
 * the one private member outside the engine (the engine's own are in src/engines/local/decoding/internals.ts).
 */
export class LlamaInternalsMissingError extends Error {
  constructor(member: string) {
    super(`node-llama-cpp no longer has ${member}; weact-mcp needs node-llama-cpp 3.21.1 exactly (see package.json)`);
    this.name = "LlamaInternalsMissingError";
  }
}

interface LlamaCreateOptions {
  bindings: unknown;
  bindingPath: string;
  buildType: "localBuild" | "prebuilt";
  buildMetadata: unknown;
  logLevel: LlamaLogLevel;
  logger: (level: LlamaLogLevel, message: string) => void;
  maxThreads?: number;
  vramPadding: number;
  ramPadding: (totalRam: number) => number;
  debug: boolean;
  numa: false;
  tempDir: false;
}
interface LlamaStatics {
  _create(options: LlamaCreateOptions): Promise<Llama>;
}

/** The binding's module did not load (a missing library, another CPU): nothing of it is in the process. */
export class BindingModuleError extends Error {
  constructor(file: string, cause: Error) {
    super(`${file} does not load: ${cause.message}`);
    this.name = "BindingModuleError";
  }
}

export interface BindingFolderOptions {
  logLevel: LlamaLogLevel;
  logger: (level: LlamaLogLevel, message: string) => void;
  maxThreads?: number;
}

/**
 * Starts llama.cpp from the binding in `folder` (llama-addon.node, the libraries beside it and node-llama-cpp's
 * `_nlcBuildMetadata.json`): what node-llama-cpp 3.21.1's `getLlama` does with a local build it found
 * (`loadBindingModule`, then the private `Llama._create`), for a build kept outside node_modules
 * (scripts/node-llama-cpp-build.sh) that `getLlama` would only find inside node_modules/node-llama-cpp/llama/localBuilds.
 * CPU only. Throws when the module cannot be loaded (a missing library, another CPU).
 */
export async function loadLlamaFromBindingFolder(folder: string, options: BindingFolderOptions): Promise<Llama> {
  const bindingPath = join(folder, "llama-addon.node");
  const statics = Llama as unknown as Partial<LlamaStatics>;
  let buildMetadata: unknown;
  let bindings: unknown;
  // a fresh instance of the module for each Llama, as loadBindingModule loads it (each has its own logger)
  const require = createRequire(import.meta.url);
  try {
    if (typeof statics._create !== "function") throw new LlamaInternalsMissingError("Llama._create");
    buildMetadata = JSON.parse(readFileSync(join(folder, "_nlcBuildMetadata.json"), "utf8"));
    delete require.cache[bindingPath];
    bindings = require(bindingPath);
  } catch (err) {
    throw new BindingModuleError(bindingPath, err as Error);
  }
  delete require.cache[bindingPath];
  return statics._create!({
    bindings,
    bindingPath,
    buildType: "localBuild",
    buildMetadata,
    logLevel: options.logLevel,
    logger: options.logger,
    maxThreads: options.maxThreads,
    vramPadding: 0,
    // node-llama-cpp's default on Linux (defaultLlamaRamPadding)
    ramPadding: (totalRam) => Math.floor(Math.min(totalRam * 0.25, 1024 * 1024 * 1024)),
    debug: false,
    numa: false,
    tempDir: false,
  });
}
