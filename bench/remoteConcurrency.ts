import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fetchModel } from "../src/modelFiles/index.js";
import { createLogger } from "../src/log.js";
import { spawnHttpServer } from "../testkit/mcpClient.js";
import { startLlamaServer } from "../testkit/llamaServerProcess.js";
import { startRecordingProxy, type RecordedRequest } from "../testkit/recordingProxy.js";
import { startVllm } from "../testkit/vllmProcess.js";
import {
  CONTEXT,
  concurrencyRow,
  drive,
  GEMMA_LIBRARY,
  GEMMA_TURN,
  localEngineModel,
  SESSION_LIMITS,
  SLOTS,
  type ConcurrencyRow,
} from "./concurrency.js";
import { fmt } from "./stats.js";

/**
 * Replays the completions a weact-mcp server sent a vLLM, straight to it: each session's requests (by the session's
 * cache salt) one after another as it sent them, the sessions at once, each under a fresh salt so the prefix cache
 * is as cold as it was. Turns are the requests that generate (max_tokens > 1); switches are the prefills.
 */
async function replayDirect(url: string, recorded: readonly RecordedRequest[], sessions: number) {
  for (const load of recorded.filter((r) => r.route === "POST /v1/load_lora_adapter"))
    await fetch(`${url}/v1/load_lora_adapter`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(load.body),
    });
  const bySession = new Map<string, Record<string, unknown>[]>();
  for (const r of recorded.filter((r) => r.route === "POST /v1/completions")) {
    const salt = String(r.body.cache_salt);
    bySession.set(salt, [...(bySession.get(salt) ?? []), r.body]);
  }
  const turns: number[] = [];
  const switches: number[] = [];
  const started = performance.now();
  await Promise.all(
    [...bySession.values()].map(async (requests) => {
      const salt = randomUUID();
      for (const body of requests) {
        const t0 = performance.now();
        const res = await fetch(`${url}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ ...body, cache_salt: salt }),
        });
        await res.arrayBuffer();
        if (!res.ok) throw new Error(`direct replay: HTTP ${res.status}`);
        (Number(body.max_tokens) > 1 ? turns : switches).push(performance.now() - t0);
      }
    }),
  );
  return concurrencyRow("vLLM direct", sessions, turns, switches, (performance.now() - started) / 1000);
}

/**
 * The client-driven concurrency run on Gemma 3 270M with the shipped library, one run, the same model and threads:
 * the local engine, llama-server through the remote backend, vLLM through the remote backend, and vLLM driven
 * directly with the token streams weact-mcp sent it (recorded by a loopback proxy, which the weact row pays for).
 */
export async function remoteConcurrency(
  dir: string,
  sessionCounts: readonly number[],
  rounds: number,
  threads: number,
): Promise<{ rows: ConcurrencyRow[]; overhead: Record<string, string>[] }> {
  const model = await fetchModel("gemma-3-270m", { logger: createLogger("warn") });
  const manifest = join(GEMMA_LIBRARY, "manifest.json");
  const adapters = ["plan", "search", "write"].map((a) => join(GEMMA_LIBRARY, `${a}.gguf`));
  const rows: ConcurrencyRow[] = [];
  const write = (name: string, config: Record<string, unknown>) => {
    const path = join(dir, name);
    writeFileSync(
      path,
      JSON.stringify({
        model: { path: model, contextSize: CONTEXT, ...(config.model as object) },
        adapters: { manifest },
        sessions: SESSION_LIMITS,
        ...(config.engine ? { engine: config.engine } : {}),
      }),
    );
    return path;
  };
  const serve = async (config: string, each: (url: string) => Promise<void>) => {
    const http = await spawnHttpServer(["--config", config]);
    try {
      await each(http.url);
    } finally {
      await http.stop();
    }
  };

  await serve(write("local.json", { model: localEngineModel(threads) }), async (url) => {
    for (const n of sessionCounts) rows.push(await drive(url, "local", n, rounds, GEMMA_TURN));
  });

  const llama = await startLlamaServer({ model, adapters, threads, slots: SLOTS, contextPerSlot: CONTEXT });
  try {
    await serve(
      write("llama.json", {
        engine: { backend: "remote", remote: { url: llama.url, flavor: "llama-server", maxInFlight: SLOTS } },
      }),
      async (url) => {
        for (const n of sessionCounts) rows.push(await drive(url, "llama-server", n, rounds, GEMMA_TURN));
      },
    );
  } finally {
    await llama.stop();
  }

  const vllm = await startVllm({ threads, maxLoras: 3, maxLoraRank: 8 });
  try {
    for (const n of sessionCounts) {
      // a fresh proxy (and server, with its own adapter folder) per count: each replay gets exactly its run's streams
      const proxy = await startRecordingProxy(vllm.url);
      try {
        await serve(
          write(`vllm-${n}.json`, {
            engine: {
              backend: "remote",
              remote: { url: proxy.url, flavor: "vllm", adapterDir: join(dir, `peft-${n}`), maxInFlight: SLOTS },
            },
          }),
          async (url) => void rows.push(await drive(url, "vLLM (weact)", n, rounds, GEMMA_TURN)),
        );
        rows.push(await replayDirect(vllm.url, proxy.recorded, n));
      } finally {
        await proxy.stop();
      }
    }
  } finally {
    await vllm.stop();
  }

  const overhead = sessionCounts.map((n) => {
    const weact = rows.find((r) => r.backend === "vLLM (weact)" && r.sessions === n)!;
    const direct = rows.find((r) => r.backend === "vLLM direct" && r.sessions === n)!;
    return {
      sessions: String(n),
      "weact overhead over direct vLLM (turns/s)": `${fmt(100 * (Number(direct.turnsPerS) / Number(weact.turnsPerS) - 1))}%`,
      "turn p50 weact/direct": fmt(Number(weact.turnP50Ms) / Number(direct.turnP50Ms)),
      "turn p95 weact/direct": fmt(Number(weact.turnP95Ms) / Number(direct.turnP95Ms)),
    };
  });
  return { rows, overhead };
}
