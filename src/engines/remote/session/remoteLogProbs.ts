import type { AdapterVersion, TokenId, TokenLogprob } from "../../../engine/index.js";
import type { CompletionResult, GeneratedLogprob } from "../flavors/Flavor.js";
import { ONE_CHARACTER } from "../turn/grammar.js";
import type { RemoteEngineServices } from "./RemoteEngineServices.js";
import type { SessionCache } from "./SessionCache.js";

type TopLogprobs = GeneratedLogprob["top"];

/**
 * The distribution after `tokens` (whose prefix the engine holds): the top `maxLogprobs`, with one sampled complete
 * character (no token that ends inside a character, which llama-server drops from its answer) unless a grammar
 * would mask the log-probs themselves.
 */
export async function distributionAfter(
  host: RemoteEngineServices,
  cache: SessionCache,
  versions: readonly AdapterVersion[],
  tokens: readonly TokenId[],
): Promise<TopLogprobs> {
  const result = await cache.send(versions, {
    prompt: tokens,
    maxTokens: 1,
    temperature: 0,
    topLogprobs: host.maxLogprobs,
    ...(host.flavor.features.grammarMasksLogprobs ? {} : { grammar: ONE_CHARACTER }),
    reuse: cache.reusable(versions, tokens),
  });
  const first = result.logprobs?.[0];
  if (!first) throw new Error(`${host.engineLabel} returned no log-probs for the next token`);
  return first.top;
}

/**
 * Per generated token, the log-probs the engine sampled it from. Where the engine left tokens out (llama-server
 * drops those that end inside a character), the token was forced, or the engine's figures are the grammar's
 * (grammarMasksLogprobs), they are recomputed by teacher forcing: one request per position, each evaluating one new
 * token as generation did, so the figures are the model's own.
 */
export async function generatedLogprobs(
  host: RemoteEngineServices,
  cache: SessionCache,
  versions: readonly AdapterVersion[],
  rendered: readonly TokenId[],
  forced: readonly TokenId[],
  r: CompletionResult,
  k: number,
): Promise<TokenLogprob[]> {
  const codec = host.codec;
  const text = (t: TokenId) => codec.detokenize([t], true);
  const entry = (token: TokenId, logprob: number, top: TopLogprobs): TokenLogprob => ({
    token,
    text: text(token),
    logprob,
    top: top.slice(0, k).map((t) => ({ ...t, text: text(t.token) })),
  });
  const { grammarMasksLogprobs, logProbs } = host.flavor.features;
  if (!forced.length && !grammarMasksLogprobs && r.logprobs && r.logprobs.length === r.generated)
    return r.logprobs.map((l) => entry(l.token, l.logprob, l.top));
  if (!r.tokens || (logProbs !== "full" && !grammarMasksLogprobs))
    return (r.logprobs ?? []).map((l) => entry(l.token, l.logprob, l.top));
  const all = [...forced, ...r.tokens];
  const out: TokenLogprob[] = [];
  for (let i = 0; i < all.length; i++) {
    const top = await distributionAfter(host, cache, versions, [...rendered, ...all.slice(0, i)]);
    out.push(entry(all[i]!, top.find((t) => t.token === all[i])?.logprob ?? -Infinity, top));
  }
  return out;
}
