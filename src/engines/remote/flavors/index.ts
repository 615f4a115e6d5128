import type { Flavor, FlavorName } from "./Flavor.js";
import { LlamaServerFlavor } from "./llamaServer.js";
import { SglangFlavor } from "./sglang.js";
import { VllmFlavor } from "./vllm.js";

export type { Flavor, FlavorFeatures, FlavorName } from "./Flavor.js";

interface FlavorOptions {
  adapterSha256?: Readonly<Record<string, string>>;
}

/** Each serving engine this backend speaks, by the name a config gives it (`engine.remote.flavor`). */
const FLAVORS = {
  "llama-server": (opts: FlavorOptions) => new LlamaServerFlavor(opts.adapterSha256),
  vllm: () => new VllmFlavor(),
  sglang: () => new SglangFlavor(),
} satisfies Record<FlavorName, (opts: FlavorOptions) => Flavor>;

/** A fresh client of the flavor's API (it keeps what it learns of one engine). */
export function flavorFor(name: FlavorName, opts: FlavorOptions = {}): Flavor {
  return FLAVORS[name](opts);
}
