import { gemmaTestAdapters, type RealModelAdapters } from "../../testkit/realModelAdapters.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { quietLogger } from "./engine.js";

export interface GemmaSet {
  model: string;
  adapters: RealModelAdapters;
}

/**
 * Gemma 3 270M and its test adapters: fetched once per machine (`weact-mcp fetch-model`'s cache), never skipped: a
 * fetch that fails fails the tests with its error.
 */
export async function gemma(): Promise<GemmaSet> {
  const model = await fetchModel("gemma-3-270m", { logger: quietLogger() });
  return { model, adapters: gemmaTestAdapters(model) };
}
