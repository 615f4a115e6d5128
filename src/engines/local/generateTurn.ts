import { LlamaChat, TokenBias, type LlamaContextSequence, type LlamaModel } from "node-llama-cpp";
import type { Conversation, FinishReason, GenerateOptions, GenerateResult, GeneratedCall } from "../../engine/index.js";
import type { Lane } from "./kv/Lane.js";
import { generationBias } from "./chat/bias.js";
import { steerCall } from "./chat/steering.js";
import { toChatModelFunctions, type RenderedConversation } from "../../llamaCpp/render.js";
import { now, syncLane, type SyncPlan } from "./kv/laneSync.js";
import { teacherForcedLogprobs } from "./tokenLogProbs.js";
import type { EngineParts } from "./kv/EngineParts.js";

/**
 * Where a turn runs: the session's active lane, its sequence (its lock held), its window, how its prompt is
 * synced.
 */
export interface TurnTarget {
  lane: Lane;
  sequence: LlamaContextSequence;
  contextSize: number;
  plan: SyncPlan;
}

/**
 * One assistant turn on the lane: apply its weights, reuse the longest cached prefix of the prompt, decode
 * with node-llama-cpp's LlamaChat (function calls returned, not executed). Caller holds the sequence lock.
 */
export async function generateTurn(
  host: EngineParts,
  target: TurnTarget,
  conversation: Conversation,
  rendered: RenderedConversation,
  options: GenerateOptions,
  queued: number,
): Promise<GenerateResult> {
  const { lane, sequence, contextSize, plan } = target;
  const { history, wrapper, tokens } = rendered;
  // Never let node-llama-cpp shift the context (it would silently drop the start of the prompt).
  const requested = options.maxTokens ?? 256;
  const maxTokens = Math.min(requested, contextSize - tokens.length);
  // a steered call that could not end within the turn is refused before anything runs
  const steer =
    options.steerToolCall &&
    steerCall(
      host.model,
      host.chatWrapper,
      conversation.functions,
      options.callable ?? Object.keys(conversation.functions),
      options.steerToolCall.name,
      { maxTokens, requested },
    );
  const started = now();
  const queueMs = started - queued;
  // the caller gave up while this call waited for the context: no weights to apply, nothing to evaluate for it
  if (options.signal?.aborted) {
    const tokenCounts = { prompt: tokens.length, cached: 0, evaluated: 0, generated: 0 };
    const timings = { queueMs, prefillMs: 0, decodeMs: 0, logprobsMs: 0, totalMs: 0 };
    return {
      text: "",
      calls: [],
      finishReason: "cancelled" as const,
      adapter: lane.weights.label,
      tokens: tokenCounts,
      timings,
      contextRemaining: contextSize - tokens.length,
    };
  }
  // leaves the lane's decode weights those of the prompt's tail: the turn is generated under them
  const prefill = await syncLane(host, lane, tokens, plan);
  const decodeStart = now();
  const model = host.model;
  const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: wrapper, autoDisposeSequence: false });
  let args: string | undefined;
  const steering = steer && { ...steer, sequence, promptLength: tokens.length, arguments: () => args };
  // node-llama-cpp does not count a function call's prefix against maxTokens: the turn's own count stops it
  const limit = new AbortController();
  let response;
  let generated = 0;
  try {
    response = await chat.generateResponse(history, {
      functions: toChatModelFunctions(conversation.functions, options.callable),
      maxTokens,
      temperature: options.temperature ?? 0,
      seed: options.seed,
      topK: options.topK,
      topP: options.topP,
      tokenBias: limited(
        model,
        generationBias(model, options.tokenBias, steering),
        () => sequence.contextTokens.length - tokens.length >= maxTokens - 1,
        () => limit.abort(),
      ),
      signal: options.signal ? AbortSignal.any([options.signal, limit.signal]) : limit.signal,
      stopOnAbortSignal: true,
      onToken: options.onToken && ((chunk) => options.onToken!((generated += chunk.length))),
      onTextChunk: options.onText,
      onFunctionCallParamsChunk: steering && ((chunk) => (args = (args ?? "") + chunk.paramsChunk)),
      customStopTriggers: options.stop?.length ? options.stop : undefined,
      maxParallelFunctionCalls: 1,
    });
  } catch (err) {
    // the turn's own limit can land where node-llama-cpp throws on an abort rather than returning
    if (!limit.signal.aborted || options.signal?.aborted) throw err;
  } finally {
    chat.dispose({ disposeSequence: false });
  }
  const decodeMs = now() - decodeStart;
  const generatedTokens = sequence.contextTokens.slice(tokens.length);
  const logprobsStart = now();
  const logprobs = options.topLogprobs
    ? await teacherForcedLogprobs(model, sequence, tokens, generatedTokens, options.topLogprobs, {
        floor: plan.cutFloor,
        refill: () => syncLane(host, lane, tokens, plan),
      })
    : undefined;
  const logprobsMs = options.topLogprobs ? now() - logprobsStart : 0;
  const calls: GeneratedCall[] = (response?.functionCalls ?? []).map((c) => ({
    name: c.functionName,
    arguments: c.params,
    raw: c.raw,
  }));
  return {
    text: response?.response ?? model.detokenize(generatedTokens),
    calls,
    finishReason:
      limit.signal.aborted && !options.signal?.aborted
        ? "length"
        : finishReason(response!.metadata.stopReason, calls.length),
    adapter: lane.weights.label,
    tokens: {
      prompt: tokens.length,
      cached: prefill.reused,
      evaluated: tokens.length - prefill.reused,
      generated: generatedTokens.length,
    },
    contextRemaining: contextSize - tokens.length - generatedTokens.length,
    timings: { queueMs, prefillMs: prefill.ms, decodeMs, logprobsMs, totalMs: now() - started },
    ...(logprobs ? { logprobs } : {}),
  };
}

/**
 * A bias that also ends the generation once `full()` holds: checked as each token is sampled, the stop deferred
 * out of the native sampling callback (which must never throw), so it lands before the next token.
 */
function limited(
  model: LlamaModel,
  bias: TokenBias | (() => TokenBias) | undefined,
  full: () => boolean,
  stop: () => void,
): () => TokenBias {
  let stopping = false;
  const none = new TokenBias(model.tokenizer);
  return () => {
    if (!stopping && full()) {
      stopping = true;
      queueMicrotask(stop);
    }
    return (typeof bias === "function" ? bias() : bias) ?? none;
  };
}

function finishReason(stopReason: string, calls: number): FinishReason {
  if (stopReason === "abort") return "cancelled";
  if (calls > 0 || stopReason === "functionCalls") return "tool_calls";
  if (stopReason === "maxTokens") return "length";
  return "stop";
}
