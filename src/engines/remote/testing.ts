/**
 * Test-only doors into the remote backend (nothing in src/ imports this file): a planted flavor that selects
 * adapters through a request path that lets llama-server's cache cross them, to prove the conformance suite
 * fails on a backend that used it.
 */
import { z } from "zod";
import type { EngineHttp } from "./client/EngineHttp.js";
import type { EngineAdapter } from "./flavors/Flavor.js";
import { LlamaServerFlavor } from "./flavors/llamaServer.js";
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
