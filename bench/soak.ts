import { callTool, connectClient, type TransportKind } from "../testkit/mcpClient.js";
import { quantile } from "./stats.js";

export interface SoakReport {
  clients: number;
  seconds: number;
  requests: number;
  cycles: number;
  errors: Record<string, number>;
  p50Ms: number;
  p95Ms: number;
  /** Every client ran one cycle per adapter before the run ended: rssStartMb was measured then, not at the end. */
  warmedUp: boolean;
  /** Cycles completed after rssStartMb was measured: the work the memory growth is about. */
  cyclesMeasured: number;
  rssStartMb: number;
  rssEndMb: number;
  leaks: number;
}

/**
 * A bounded loopback load: `clients` MCP clients (alternating Streamable HTTP and SSE) each loop
 * create -> generate -> load_lora -> generate -> offload_lora -> search -> get_session -> close for
 * `seconds`. Every session's final history is checked against what that client sent (no cross-session leak).
 */
const ADAPTERS = ["plan", "search", "write"];

/**
 * Runs for `seconds`, and on (for at most 90 s more) until `measuredCycles` cycles have completed after the
 * warm-up, so a short run on a loaded machine still measures memory over real work instead of over nothing.
 */
export async function runSoak(
  url: string,
  opts: { clients: number; seconds: number; measuredCycles?: number },
): Promise<SoakReport> {
  const latencies: number[] = [];
  const errors: Record<string, number> = {};
  let cycles = 0;
  let leaks = 0;
  const deadline = Date.now() + opts.seconds * 1000;
  const rss = async (client: Awaited<ReturnType<typeof connectClient>>["client"]) =>
    (await callTool<{ rss_bytes: number }>(client, "list_adapters")).rss_bytes / 2 ** 20;

  const probe = await connectClient("http", { url });
  let warmClients = 0;
  let warmedUp = false;
  let cyclesAtStart: number | undefined;
  const measuring = () => cyclesAtStart === undefined || cycles - cyclesAtStart < (opts.measuredCycles ?? 0);
  const running = () =>
    Date.now() < deadline || (opts.measuredCycles !== undefined && Date.now() < deadline + 90_000 && measuring());
  let onWarm!: () => void;
  // memory is measured from when every client has run one cycle per adapter: by then every adapter set has been
  // applied (llama.cpp sizes its compute buffers per graph) and contexts and caches are allocated
  const warm = new Promise<void>((resolve) => (onWarm = resolve));

  const worker = async (index: number) => {
    const kind: TransportKind = index % 2 ? "sse" : "http";
    const { client, close } = await connectClient(kind, { url });
    const timed = async <T>(name: string, args: Record<string, unknown>): Promise<T> => {
      const started = performance.now();
      try {
        return await callTool<T>(client, name, args, { timeout: 120_000 });
      } catch (err) {
        const kindOf = /busy/.test((err as Error).message)
          ? "busy"
          : /timed out/i.test((err as Error).message)
            ? "timeout"
            : `${name}`;
        errors[kindOf] = (errors[kindOf] ?? 0) + 1;
        throw err;
      } finally {
        latencies.push(performance.now() - started);
      }
    };
    try {
      for (let i = 0; running(); i++) {
        const marker = `client ${index} cycle ${i} ${Math.random().toString(36).slice(2)}`;
        try {
          const { session_id } = await timed<{ session_id: string }>("create_session", { task: `task of ${marker}` });
          await timed("generate", { session_id, max_tokens: 3 });
          await timed("load_lora", { session_id, adapter: ADAPTERS[i % ADAPTERS.length] });
          await timed("generate", { session_id, max_tokens: 3 });
          await timed("offload_lora", { session_id });
          await timed("search", { query: `river ${marker}`, session_id });
          const s = await timed<{
            task: string;
            history: { role: string; content: string; tool_calls?: { arguments: { query?: string } }[] }[];
          }>("get_session", { session_id });
          const mine =
            s.task === `task of ${marker}` &&
            s.history.every(
              (m) => !m.tool_calls?.some((c) => c.arguments.query !== undefined && !c.arguments.query.includes(marker)),
            );
          if (!mine) leaks++;
          await timed("close_session", { session_id });
          cycles++;
          if (i === ADAPTERS.length - 1 && ++warmClients === opts.clients) onWarm();
        } catch {
          // counted in errors; the next cycle starts clean
        }
      }
    } finally {
      await close();
    }
  };
  const workers = Promise.all(Array.from({ length: opts.clients }, (_, i) => worker(i)));
  await Promise.race([warm.then(() => (warmedUp = true)), workers]);
  const rssStartMb = await rss(probe.client);
  cyclesAtStart = cycles;
  await workers;
  const rssEndMb = await rss(probe.client);
  await probe.close();
  return {
    clients: opts.clients,
    seconds: opts.seconds,
    requests: latencies.length,
    cycles,
    errors,
    p50Ms: Number(quantile(latencies, 0.5).toFixed(1)),
    p95Ms: Number(quantile(latencies, 0.95).toFixed(1)),
    warmedUp,
    cyclesMeasured: cycles - (cyclesAtStart ?? cycles),
    rssStartMb: Number(rssStartMb.toFixed(1)),
    rssEndMb: Number(rssEndMb.toFixed(1)),
    leaks,
  };
}
