import { callTool, connectClient, spawnHttpServer, type TransportKind } from "../testkit/mcpClient.js";
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
          const { session_id } = await callTool<{ session_id: string }>(client, "create_session", {
            task: "Benchmark the switch.",
          });
          const started = performance.now();
          const r = await callTool<{ switch: { switch_ms: number; rebuild_ms: number; rebuilt_tokens: number } }>(
            client,
            "load_lora",
            { session_id, adapter: i % 2 ? "plan" : "search" },
          );
          const elapsed = performance.now() - started;
          await callTool(client, "close_session", { session_id });
          if (i >= 0) {
            total.push(elapsed);
            server.push(r.switch.switch_ms + r.switch.rebuild_ms);
            tokens = r.switch.rebuilt_tokens;
          }
        }
        rows.push({
          transport: kind,
          rebuiltTokens: tokens,
          roundTripP50Ms: fmt(quantile(total, 0.5)),
          roundTripP95Ms: fmt(quantile(total, 0.95)),
          switchPlusRebuildP50Ms: fmt(quantile(server, 0.5)),
        });
      } finally {
        await close();
      }
    }
    return rows;
  } finally {
    await http.stop();
  }
}

/** External tool round trips through MCP over HTTP: search on the shipped corpus and run_code of an empty program. */
export async function toolRoundTrips(configPath: string, reps: number) {
  const http = await spawnHttpServer(["--config", configPath]);
  const { client, close } = await connectClient("http", { url: http.url });
  try {
    const time = async (name: string, args: Record<string, unknown>) => {
      const samples: number[] = [];
      let isolation = "";
      for (let i = -2; i < reps; i++) {
        const started = performance.now();
        const r = await callTool<{ isolation?: string }>(client, name, args);
        if (i >= 0) samples.push(performance.now() - started);
        isolation = r.isolation ?? isolation;
      }
      return {
        tool: name,
        detail: isolation || String(args.query ?? ""),
        p50Ms: fmt(quantile(samples, 0.5)),
        p95Ms: fmt(quantile(samples, 0.95)),
      };
    };
    return [
      await time("search", { query: "longest river in Europe" }),
      await time("run_code", { language: "python", code: "pass" }),
      await time("run_code", { language: "javascript", code: "0" }),
    ];
  } finally {
    await close();
    await http.stop();
  }
}
