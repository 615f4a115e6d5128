import { callTool, connectClient, spawnHttpServer, type TransportKind } from "../src/client/mcpClient.js";
import { fmt, quantile } from "./stats.js";

/**
 * load_lora round trip through a real client and a spawned server on the warm demo model: the switch
 * plus the KV rebuild of a fresh session's history, plus the protocol and transport.
 */
export async function loadLoraRoundTrip(configPath: string, reps: number) {
  const http = await spawnHttpServer(["--config", configPath]);
  try {
    const rows = [];
    for (const kind of ["stdio", "http"] as TransportKind[]) {
      const { client, close } = await connectClient(kind, { url: http.url, serverArgs: ["--config", configPath] });
      try {
        const total: number[] = [];
        const server: number[] = [];
        let tokens = 0;
        for (let i = -3; i < reps; i++) {
          // a fresh session each time, so every load rebuilds the same history (exchanges would grow it)
          const { session_id } = await callTool<{ session_id: string }>(client, "create_session", { task: "Benchmark the switch." });
          const started = performance.now();
          const r = await callTool<{ switch: { switch_ms: number; rebuild_ms: number; rebuilt_tokens: number } }>(client, "load_lora", { session_id, adapter: i % 2 ? "plan" : "search" });
          const elapsed = performance.now() - started;
          await callTool(client, "close_session", { session_id });
          if (i >= 0) {
            total.push(elapsed);
            server.push(r.switch.switch_ms + r.switch.rebuild_ms);
            tokens = r.switch.rebuilt_tokens;
          }
        }
        rows.push({ transport: kind, rebuiltTokens: tokens, roundTripP50Ms: fmt(quantile(total, 0.5)), roundTripP95Ms: fmt(quantile(total, 0.95)), switchPlusRebuildP50Ms: fmt(quantile(server, 0.5)) });
      } finally {
        await close();
      }
    }
    return rows;
  } finally {
    await http.stop();
  }
}
