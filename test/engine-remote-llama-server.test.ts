import { afterAll, beforeAll } from "vitest";
import { LocalChatCodec } from "../native/index.js";
import { startLlamaServer, type LlamaServer } from "../src/client/llamaServer.js";
import type { Conversation, LogProbs } from "../src/engine/index.js";
import { RemoteEngine } from "../src/engines/remote/index.js";
import { openCrossingSession } from "../src/engines/remote/testing.js";
import { Mutex } from "../src/mutex.js";
import { describeEngineConformance, type ReferenceWeights } from "./engine-conformance/conformance.js";
import { demo, quietLogger, TEST_THREADS } from "./helpers/engine.js";

/** Sessions the backend may open; the next slot is the reference's own. */
const SESSIONS = 4;
const REFERENCE_SLOT = SESSIONS;
const ADAPTERS = [demo.adapters.plan!, demo.adapters.search!, demo.adapters.write!, demo.adapters["write-v2"]!];
/** Requests that sample one token: a complete ASCII character (the distribution itself is the raw one). */
const ONE_CHARACTER = "root ::= [\\x09\\x0a\\x20-\\x7e]+";

let server: LlamaServer;
let vocabularySize = 0;

beforeAll(async () => {
  // builds llama-server first on a machine that has none (about 12 minutes on 2 cores, once; .ci/run does it before the suite)
  server = await startLlamaServer({ model: demo.model, adapters: ADAPTERS, threads: TEST_THREADS, slots: SESSIONS + 1, contextPerSlot: 4096 });
  const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { meta: { n_vocab: number } }[] };
  vocabularySize = models.data[0]!.meta.n_vocab;
}, 30 * 60_000);
afterAll(async () => server?.stop());

const post = async <T>(path: string, body: unknown): Promise<T> => {
  const res = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
};

/** llama-server's `lora` list for adapter files at their scales: its ids by the paths it was started with. */
function loraList(weights: readonly ReferenceWeights[]): { id: number; scale: number }[] {
  return ADAPTERS.map((file, id) => ({ id, scale: weights.find((w) => w.filePath === file)?.scale ?? 0 }));
}

/**
 * The reference: a fresh evaluation on a slot no session uses, without the backend's code on its path: the prompt
 * but its last token evaluated from scratch (`cache_prompt: false`), then the last token alone, the split every
 * backend session's cache has at a sampled position.
 */
const referenceLock = new Mutex();
async function referenceLogProbs(tokens: readonly number[], weights: readonly ReferenceWeights[]): Promise<LogProbs> {
  return referenceLock.run(async () => {
    const lora = loraList(weights);
    await post("/completion", { prompt: tokens.slice(0, -1), n_predict: 0, id_slot: REFERENCE_SLOT, cache_prompt: false, lora, grammar: ONE_CHARACTER });
    const r = await post<{ completion_probabilities: { top_logprobs: { id: number; logprob: number }[] }[] }>("/completion", {
      prompt: tokens,
      n_predict: 1,
      n_probs: vocabularySize,
      id_slot: REFERENCE_SLOT,
      lora,
      temperature: 0,
      grammar: ONE_CHARACTER,
    });
    return new Map(r.completion_probabilities[0]!.top_logprobs.map((t) => [t.id, t.logprob]));
  });
}

async function remoteEngine(): Promise<RemoteEngine> {
  const logger = quietLogger();
  return RemoteEngine.connect({ url: server.url, flavor: "llama-server", timeoutMs: 30_000, maxInFlight: 8, sessions: SESSIONS, contextSize: 4096, codec: await LocalChatCodec.load({ modelPath: demo.model, logger }), logger });
}

describeEngineConformance<RemoteEngine>("remote (llama-server)", {
  strategies: ["rebuild"],
  async makeEngine(_strategy, adapters) {
    const engine = await remoteEngine();
    for (const [alias, filePath] of Object.entries(adapters)) await engine.addAdapter({ alias, filePath, scale: 1 });
    return engine;
  },
  reference: (engine, _session, weights, conversation: Conversation) => referenceLogProbs(engine.renderTokens(conversation), weights),
  adapters: { plan: demo.adapters.plan!, search: demo.adapters.search!, write: demo.adapters.write!, writeV2: demo.adapters["write-v2"]! },
  openStaleSession: openCrossingSession,
  tolerance: 1e-3,
});
