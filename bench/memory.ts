import { statSync } from "node:fs";
import { LocalEngine } from "../src/engines/local/index.js";
import type { EngineLogger } from "../src/engine/index.js";
import { fmt } from "./stats.js";

const rssMB = () => process.memoryUsage().rss / 2 ** 20;

/**
 * RSS with the model alone vs the model plus every adapter, against the adapters' file sizes.
 * The model is evaluated once first so its mmapped weights are resident in the baseline.
 */
export async function adapterMemory(modelPath: string, adapters: Record<string, string>, logger: EngineLogger) {
  const engine = await LocalEngine.load({
    modelPath,
    gpu: false,
    logger,
    contextSize: 512,
    sequencesPerContext: 1,
    maxContexts: 1,
  });
  try {
    const conv = { functions: {}, turns: [{ role: "user" as const, text: "warm up the weights" }] };
    const session = await engine.openSession();
    await session.prefill(conv);
    const modelOnly = rssMB();
    for (const [alias, filePath] of Object.entries(adapters)) await engine.addAdapter({ alias, filePath, scale: 1 });
    const loaded = rssMB(); // before any evaluation under them: what loading the adapters alone added
    // apply each once so any lazily allocated state is counted
    for (const alias of Object.keys(adapters)) await session.switchWeights(alias, conv);
    const withAdapters = rssMB();
    await session.close();
    const filesMB = Object.values(adapters).reduce((n, p) => n + statSync(p).size, 0) / 2 ** 20;
    const growth = withAdapters - modelOnly;
    return {
      modelFileMB: fmt(statSync(modelPath).size / 2 ** 20, 1),
      rssModelMB: fmt(modelOnly, 1),
      rssWithAdaptersMB: fmt(withAdapters, 1),
      adapterFilesMB: fmt(filesMB, 1),
      growthMB: fmt(growth, 1),
      growthOverFiles: fmt(growth / filesMB, 3),
      growthAtLoadMB: fmt(loaded - modelOnly, 1),
      growthAtLoadOverFiles: fmt((loaded - modelOnly) / filesMB, 3),
      slackMB: fmt(growth - filesMB, 1),
    };
  } finally {
    await engine.dispose();
  }
}
