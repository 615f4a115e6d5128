/**
 * Test-only doors into the remote backend (nothing in src/ imports this file): planted flavors that let an engine's
 * cache cross weights (llama-server's global scales, a vLLM session that never changes its adapter name, a vLLM
 * refresh under the same name), to prove the conformance suites fail on a backend that used them.
 */
import { cp } from "node:fs/promises";
import { dirname, join } from "node:path";
import { z } from "zod";
import type { EngineHttp } from "./client/EngineHttp.js";
import type { CompletionRequest, EngineAdapter, PreparedAdapter } from "./flavors/Flavor.js";
import { LlamaServerFlavor } from "./flavors/llamaServer.js";
import { VllmFlavor } from "./flavors/vllm.js";
import type { RemoteEngine } from "./RemoteEngine.js";
import type { RemoteEngineSession } from "./session/RemoteEngineSession.js";

/**
 * Selects a request's adapters by the server's global scales (`POST /lora-adapters`) and sends no `lora` field,
 * and lets every request continue from the slot's cache: llama-server then keeps the slot's cache although it
 * was computed under other adapters (llama.cpp #26207).
 */
export class GlobalScalesFlavor extends LlamaServerFlavor {
  protected override async selectAdapters(
    http: EngineHttp,
    _body: Record<string, unknown>,
    active: readonly EngineAdapter[],
  ): Promise<void> {
    await http.answer({ path: "/lora-adapters", body: this.loraList(active) }, z.unknown());
  }

  protected override cachePrompt(): boolean {
    return true;
  }
}

/** A llama-server session whose requests select adapters through the global scales: its switches keep a stale cache. */
export function openCrossingSession(engine: RemoteEngine): Promise<RemoteEngineSession> {
  return engine.openSessionWith({ flavor: new GlobalScalesFlavor() });
}

/**
 * A vLLM session that keeps naming the weights of its first request whatever it switches to: each request then
 * continues from the prefix cache vLLM holds under those weights, and computes its new tokens under them too, the
 * stale-cache bug as an engine keyed by adapter name would show it.
 */
export class StaleWeightsFlavor extends VllmFlavor {
  private first: unknown;

  constructor(servedModel: string) {
    super();
    this.base = servedModel;
  }

  override body(req: CompletionRequest): Record<string, unknown> {
    const body = super.body(req);
    this.first ??= body.model;
    return { ...body, model: this.first };
  }
}

/** A vLLM session whose switches keep the weights its cache was first built under. */
export function openStaleVllmSession(engine: RemoteEngine, servedModel: string): Promise<RemoteEngineSession> {
  return engine.openSessionWith({ flavor: new StaleWeightsFlavor(servedModel) });
}

/**
 * Registers every version of an adapter under its alias alone, from one folder per alias that a refresh writes the
 * new weights over, reloaded in place (`load_inplace`), and never unloads: the same-name refresh of vLLM #42125.
 * vLLM 0.32 keys an adapter's prefix-cache blocks by its name and path, so the blocks computed under the old weights
 * still match. The real flavor names each version, and its folder, by its content instead. The engine must see the
 * folders at the paths this server writes them (adapterDir without localAdapterDir).
 */
export class SameNameFlavor extends VllmFlavor {
  override async register(http: EngineHttp, adapter: PreparedAdapter): Promise<EngineAdapter> {
    const alias = adapter.version.alias;
    const folder = join(dirname(adapter.peft!.enginePath), `same-name-${alias}`);
    await cp(adapter.peft!.enginePath, folder, { recursive: true, force: true });
    await http.answer(
      { path: "/v1/load_lora_adapter", body: { lora_name: alias, lora_path: folder, load_inplace: true } },
      z.unknown(),
    );
    return { version: adapter.version, handle: alias, requestScale: 1 };
  }

  override async unregister(): Promise<void> {
    // the name now holds the refreshed weights: unloading the old version's name would unload them
  }
}
