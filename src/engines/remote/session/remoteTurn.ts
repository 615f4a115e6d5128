import type {
  AdapterVersion,
  Conversation,
  FinishReason,
  GenerateOptions,
  GenerateResult,
  GeneratedCall,
  TokenId,
} from "../../../engine/index.js";
import { parseTurn, ResponseTextStream } from "../turn/calls.js";
import { boundStrings, countStrings, turnGrammar, type GrammarFunction, type TurnStart } from "../turn/grammar.js";
import type { RemoteEngineServices } from "./RemoteEngineServices.js";
import { generatedLogprobs } from "./remoteLogProbs.js";
import type { Prefilled, SessionCache } from "./SessionCache.js";

/** Tokens a character can take at most once the grammar has escaped it ("\\u00e9" is six). */
const TOKENS_PER_CHAR = 6;

/**
 * Where a turn runs: the session's cache, the adapters it is generated under (and their label), the session's window.
 */
export interface TurnTarget {
  cache: SessionCache;
  versions: readonly AdapterVersion[];
  adapter: string | null;
  contextSize: number;
}

/**
 * One assistant turn after the rendered `tokens`: a prefill where sessions have slots, then one request under
 * the turn's function-calling grammar, its text parsed into text and a call. Caller holds the session's lock.
 */
export async function generateTurn(
  host: RemoteEngineServices,
  target: TurnTarget,
  conversation: Conversation,
  tokens: readonly TokenId[],
  options: GenerateOptions,
  queued: number,
): Promise<GenerateResult> {
  const { cache, versions, adapter, contextSize } = target;
  const codec = host.codec;
  const started = performance.now();
  const queueMs = started - queued;
  const maxTokens = Math.min(options.maxTokens ?? 256, contextSize - tokens.length);
  const cancelled = (prefillMs = 0): GenerateResult => ({
    text: "",
    calls: [],
    finishReason: "cancelled",
    adapter,
    tokens: { prompt: tokens.length, cached: 0, evaluated: 0, generated: 0 },
    contextRemaining: contextSize - tokens.length,
    timings: { queueMs, prefillMs, decodeMs: 0, logprobsMs: 0, totalMs: performance.now() - started },
  });
  if (options.signal?.aborted) return cancelled();

  const syntax = codec.callSyntax;
  const names = Object.keys(conversation.functions).filter((n) => !options.callable || options.callable.includes(n));
  const steer = options.steerToolCall;
  const forcedText = steer ? syntax.trigger + (steer.name ?? "") : "";
  const forced = steer
    ? [...codec.tokenize(syntax.trigger, true), ...(steer.name ? codec.tokenize(steer.name) : [])]
    : [];
  const grammar = await turnGrammarOf(host, conversation, names, steer, maxTokens - forced.length);
  const bias = new Map<TokenId, number>();
  for (const [text, logit] of Object.entries(options.tokenBias ?? {}))
    for (const t of codec.tokenize(text, true)) bias.set(t, logit);

  let prefill: Prefilled | undefined;
  try {
    if (host.flavor.features.slots) prefill = await cache.prefill(versions, tokens, "ifNeeded", options.signal);
    const stream = options.onText && new ResponseTextStream(syntax.trigger, options.onText);
    const decodeStart = performance.now();
    const prompt = [...tokens, ...forced];
    const reuse = cache.reusable(versions, prompt);
    const r = await cache.send(versions, {
      prompt,
      maxTokens: Math.max(0, maxTokens - forced.length),
      temperature: options.temperature ?? 0,
      seed: options.seed,
      topK: options.topK,
      topP: options.topP,
      grammar,
      logitBias: bias,
      topLogprobs: options.topLogprobs,
      stop: options.stop,
      showSpecial: syntax.specialTokens,
      reuse,
      signal: options.signal,
      onText:
        options.onText || options.onToken
          ? (text, generated) => {
              stream?.update(forcedText + text);
              options.onToken?.(forced.length + generated);
            }
          : undefined,
    });
    const decodeMs = performance.now() - decodeStart;
    const output = forcedText + r.text;
    stream?.update(output);
    const parsed = parseTurn(
      output,
      syntax,
      names.map((name) => ({ name, hasParams: conversation.functions[name]!.parameters !== undefined })),
    );
    const calls: GeneratedCall[] = parsed.call
      ? [
          {
            name: parsed.call.name,
            arguments: parsed.call.params,
            raw: codec.rawCall(parsed.call.name, parsed.call.paramsText),
          },
        ]
      : [];
    const generated = forced.length + r.generated;
    const logprobsStart = performance.now();
    const logprobs = options.topLogprobs
      ? await generatedLogprobs(host, cache, versions, tokens, forced, r, options.topLogprobs)
      : undefined;
    const logprobsMs = options.topLogprobs ? performance.now() - logprobsStart : 0;
    // the engine's own figures: of the prefill when one ran, else of this request
    const cached = Math.min(prefill ? prefill.cached : (r.cached ?? 0), tokens.length);
    const finishReason: FinishReason = calls.length
      ? "tool_calls"
      : r.finish === "length" || parsed.truncatedCall
        ? "length"
        : "stop";
    return {
      text: parsed.text,
      calls,
      finishReason,
      adapter,
      tokens: { prompt: tokens.length, cached, evaluated: tokens.length - cached, generated },
      contextRemaining: contextSize - tokens.length - generated,
      timings: {
        queueMs,
        prefillMs: prefill?.ms ?? 0,
        decodeMs,
        logprobsMs,
        totalMs: performance.now() - started,
      },
      ...(logprobs ? { logprobs } : {}),
    };
  } catch (err) {
    if (options.signal?.aborted) return cancelled(prefill?.ms);
    throw err;
  }
}

/**
 * The function-calling grammar of this turn; a steered call's free strings are bounded so it ends within the turn's
 * tokens.
 */
async function turnGrammarOf(
  host: RemoteEngineServices,
  conversation: Conversation,
  names: readonly string[],
  steer: GenerateOptions["steerToolCall"],
  budget: number,
): Promise<string> {
  const codec = host.codec;
  const syntax = codec.callSyntax;
  const functions: GrammarFunction[] = [];
  for (const name of names) {
    let schema = conversation.functions[name]!.parameters;
    if (schema && steer) {
      const fixed =
        codec.tokenize(syntax.paramsPrefix + syntax.suffix, true).length +
        8 * (Object.keys((schema.properties as object | undefined) ?? {}).length + 1);
      const strings = countStrings(schema);
      if (strings)
        schema = boundStrings(schema, Math.max(1, Math.floor((budget - fixed) / (strings * TOKENS_PER_CHAR))));
    }
    functions.push({ name, params: schema && (await codec.paramsGrammar(schema)) });
  }
  const start: TurnStart = !steer
    ? { kind: "text" }
    : steer.name
      ? { kind: "arguments", name: steer.name }
      : { kind: "call" };
  return turnGrammar(syntax, functions, start);
}
