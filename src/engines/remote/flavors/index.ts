import type { Flavor, FlavorName } from "./Flavor.js";
import { LlamaServerFlavor } from "./llamaServer.js";
import { SglangFlavor } from "./sglang.js";
import { VllmFlavor } from "./vllm.js";

export { FLAVORS, type Flavor, type FlavorName, type FlavorFeatures } from "./Flavor.js";

/** A fresh client of the flavor's API (it keeps what it learns of one engine). */
export function flavorFor(name: FlavorName, opts: { adapterSha256?: Readonly<Record<string, string>> } = {}): Flavor {
  if (name === "llama-server") return new LlamaServerFlavor(opts.adapterSha256);
  if (name === "vllm") return new VllmFlavor();
  return new SglangFlavor();
}
