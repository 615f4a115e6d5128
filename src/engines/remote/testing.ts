/**
 * Test-only doors into the remote backend (nothing in src/ imports this file): a planted flavor that selects
 * adapters through a request path that lets llama-server's cache cross them, to prove the conformance suite
 * fails on a backend that used it.
 */
import type { EngineHttp } from "./http/EngineHttp.js";
import type { EngineAdapter } from "./flavors/Flavor.js";
import { LlamaServerFlavor } from "./flavors/llamaServer.js";
import type { RemoteEngine } from "./RemoteEngine.js";
import type { RemoteEngineSession } from "./RemoteEngineSession.js";

/**
 * Selects a request's adapters by the server's global scales (`POST /lora-adapters`) and sends no `lora` field:
 * llama-server then keeps the slot's cache although it was computed under other adapters (llama.cpp #26207).
 */
export class GlobalScalesFlavor extends LlamaServerFlavor {
  protected override async selectAdapters(http: EngineHttp, _body: Record<string, unknown>, active: readonly EngineAdapter[]): Promise<void> {
    await http.json({ path: "/lora-adapters", body: this.serverAdapters.map((a) => ({ id: a.id, scale: active.find((x) => x.handle === a.id)?.requestScale ?? 0 })) });
  }
}

/** A llama-server session whose requests select adapters through the global scales: its switches keep a stale cache. */
export function openCrossingSession(engine: RemoteEngine): Promise<RemoteEngineSession> {
  return engine.openSessionWith({ flavor: new GlobalScalesFlavor() });
}
