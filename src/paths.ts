import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The package root, found from this file whether it runs from src/ (tests) or dist/src/ (built). */
function findPackageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json"))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error("weact-mcp: cannot find the package root (no package.json above the code)");
    dir = parent;
  }
  return dir;
}

export const PACKAGE_ROOT = findPackageRoot();
export const DEFAULT_MANIFEST = join(PACKAGE_ROOT, "adapters", "manifest.json");
/**
 * The files of a trained demo library in `dir`: what `npm run train-demo -- --out DIR` writes and what serving,
 * `eval` and `check:trained` read, named once.
 */
export function trainedLibrary(dir: string) {
  return {
    model: join(dir, "weact-demo-trained.gguf"),
    manifest: join(dir, "manifest.json"),
    training: join(dir, "training.json"),
    evalTasks: join(dir, "eval-tasks.jsonl"),
    counterfactualTasks: join(dir, "eval-counterfactual.jsonl"),
    computationTasks: join(dir, "eval-computation.jsonl"),
    computationCounterfactualTasks: join(dir, "eval-computation-counterfactual.jsonl"),
    counterfactualCorpus: join(dir, "counterfactual-corpus"),
    counterfactualConfig: join(dir, "counterfactual.json"),
  };
}
/** The shipped demo library that learned (`npm run train-demo` makes it): its base model and its manifest. */
export const TRAINED_DIR = join(PACKAGE_ROOT, "models", "trained");
export const { model: TRAINED_MODEL, manifest: TRAINED_MANIFEST } = trainedLibrary(TRAINED_DIR);
export const PROMPTS_DIR = join(PACKAGE_ROOT, "prompts");
/**
 * The shipped search corpus (the local index's default `tools.search.corpus`): data at the package root, beside
 * prompts/, read where the package is, so from src/ and dist/src/ alike. `npm run train-demo` rewrites its entities/.
 */
export const DEFAULT_CORPUS = join(PACKAGE_ROOT, "corpus");
/** Local state (indexes, traces) that is not committed. */
export const STATE_DIR = join(PACKAGE_ROOT, ".weact");
