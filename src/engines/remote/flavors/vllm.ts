import { z } from "zod";
import { EngineRequestError, UnsupportedFeatureError, type TokenId } from "../../../engine/index.js";
import { errorDetail, type EngineHttp } from "../client/EngineHttp.js";
import {
  AdapterLostError,
  PEFT_ENGINE_FEATURES,
  type CompletionRequest,
  type CompletionResult,
  type EngineAdapter,
  type EngineFacts,
  type Flavor,
  type FlavorFeatures,
  type GeneratedLogprob,
  type PreparedAdapter,
} from "./Flavor.js";
import { isMissingRoute, servedBaseModel, TokenizeSchema } from "./openaiModels.js";

const Int = z.number().int();
const ChoiceSchema = z.object({
  text: z.string().default(""),
  finish_reason: z.string().nullish(),
  token_ids: z.array(Int).nullish(),
  logprobs: z
    .object({
      tokens: z.array(z.string()).optional(),
      token_logprobs: z.array(z.number().nullable()).optional(),
      top_logprobs: z.array(z.record(z.string(), z.number()).nullable()).optional(),
    })
    .nullish(),
});
const UsageSchema = z
  .object({
    prompt_tokens: Int.optional(),
    completion_tokens: Int.optional(),
    prompt_tokens_details: z.object({ cached_tokens: Int.nullish() }).nullish(),
  })
  .nullish();
/** A completion, or one streamed chunk of it (the last one with the usage and no choice). */
const CompletionSchema = z.object({ choices: z.array(ChoiceSchema).default([]), usage: UsageSchema });
type CompletionBody = z.infer<typeof CompletionSchema>;

/** "token_id:42" (return_tokens_as_token_ids) -> 42. */
const tokenId = (s: string) => Number(s.slice(s.lastIndexOf(":") + 1));

/**
 * vLLM's OpenAI-compatible server. Adapters are PEFT folders under engine.remote.adapterDir, loaded at runtime
 * under their versioned names (`POST /v1/load_lora_adapter`, which needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)
 * and unloaded when no session holds them; a request selects one by naming it as its `model`. Prompts go as token
 * ids to /v1/completions with the grammar in `structured_outputs`; cached tokens come from
 * `usage.prompt_tokens_details.cached_tokens` (served with --enable-prompt-tokens-details).
 */
export class VllmFlavor implements Flavor {
  readonly name = "vllm" as const;
  readonly title = "vLLM";
  readonly features: FlavorFeatures = {
    ...PEFT_ENGINE_FEATURES,
    // measured on vLLM 0.32: a token's log-prob under the turn grammar differs from the distribution's by up to 0.009
    grammarMasksLogprobs: true,
    baseAsZeroAdapter: true,
    contextLimit: "serve a longer --max-model-len, then raise model.contextSize",
  };
  protected base = "";

  async inspect(http: EngineHttp, model: string | undefined): Promise<EngineFacts> {
    const served = await servedBaseModel(http, model);
    this.base = served.id;
    if (!served.contextSize)
      throw new EngineRequestError(
        http.label,
        200,
        `GET /v1/models gives no max_model_len for ${served.id}: is this vLLM (engine.remote.flavor)?`,
      );
    return { servedModel: served.id, contextSize: served.contextSize };
  }

  async reset(): Promise<boolean> {
    // a restart loses the runtime-loaded adapters, which a request naming one finds out (AdapterLostError)
    return false;
  }

  async tokenize(http: EngineHttp, text: string): Promise<TokenId[] | undefined> {
    const res = await http.json(
      { path: "/tokenize", body: { model: this.base, prompt: text, add_special_tokens: false } },
      TokenizeSchema,
      (r) => r.status === 404,
    );
    return res?.tokens;
  }

  async register(http: EngineHttp, adapter: PreparedAdapter): Promise<EngineAdapter> {
    const { name, enginePath } = adapter.peft!;
    let routeMissing = false;
    await http.json(
      { path: "/v1/load_lora_adapter", body: { lora_name: name, lora_path: enginePath } },
      z.unknown(),
      ({ status, body }) => {
        routeMissing = isMissingRoute(status, body);
        // the versioned name is content-addressed: loaded already (by an earlier run) means these very weights
        return routeMissing || (status === 400 && /already been loaded/.test(errorDetail(body)));
      },
    );
    if (routeMissing) {
      throw new UnsupportedFeatureError(
        http.label,
        "loading adapters at runtime here",
        'start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment and --enable-lora (README "Remote engines")',
      );
    }
    return { version: adapter.version, handle: name, requestScale: 1 };
  }

  async unregister(http: EngineHttp, adapter: EngineAdapter): Promise<void> {
    await http.json(
      { path: "/v1/unload_lora_adapter", body: { lora_name: adapter.handle } },
      z.unknown(),
      ({ status }) => status === 404,
    );
  }

  body(req: CompletionRequest): Record<string, unknown> {
    return {
      model: req.adapters[0]?.handle ?? this.base,
      prompt: req.prompt,
      // vLLM generates at least one token; a prefill's token is ignored
      max_tokens: Math.max(1, req.maxTokens),
      temperature: req.temperature,
      skip_special_tokens: false,
      spaces_between_special_tokens: false,
      return_token_ids: true,
      ...(req.seed !== undefined ? { seed: req.seed } : {}),
      ...(req.topK !== undefined ? { top_k: req.topK } : {}),
      ...(req.topP !== undefined ? { top_p: req.topP } : {}),
      ...(req.grammar ? { structured_outputs: { grammar: req.grammar } } : {}),
      ...(req.logitBias?.size
        ? { logit_bias: Object.fromEntries([...req.logitBias].map(([t, b]) => [String(t), b])) }
        : {}),
      ...(req.topLogprobs ? { logprobs: req.topLogprobs, return_tokens_as_token_ids: true } : {}),
      ...(req.stop?.length ? { stop: req.stop } : {}),
      // the session's salt keeps other sessions off its prefix cache (a cleared session has a new one)
      ...(req.cacheSalt ? { cache_salt: req.cacheSalt } : {}),
    };
  }

  async complete(http: EngineHttp, req: CompletionRequest): Promise<CompletionResult> {
    const body = this.body(req);
    const lost = (status: number, b: unknown) =>
      status === 404 && req.adapters.length > 0 && /does not exist/.test(errorDetail(b));
    let final: CompletionBody;
    try {
      if (req.onText && !req.topLogprobs && req.maxTokens > 0) {
        let text = "";
        let tokens: number[] = [];
        let finish: string | null | undefined;
        let usage: CompletionBody["usage"];
        await http.stream(
          {
            path: "/v1/completions",
            body: { ...body, stream: true, stream_options: { include_usage: true } },
            signal: req.signal,
          },
          CompletionSchema,
          (chunk) => {
            const choice = chunk.choices[0];
            if (choice) {
              text += choice.text;
              tokens = [...tokens, ...(choice.token_ids ?? [])];
              finish = choice.finish_reason ?? finish;
              req.onText!(text, tokens.length);
            }
            if (chunk.usage) usage = chunk.usage;
          },
        );
        final = { choices: [{ text, token_ids: tokens, finish_reason: finish }], usage };
      } else {
        final = await http.answer({ path: "/v1/completions", body, signal: req.signal }, CompletionSchema);
      }
    } catch (err) {
      if (err instanceof EngineRequestError && lost(err.status, err.detail)) throw new AdapterLostError(err.detail);
      throw err;
    }
    return readCompletion(final, req.maxTokens === 0);
  }
}

/** vLLM's completion (or its streamed pieces, joined) as a result. */
function readCompletion(body: CompletionBody, prefillOnly: boolean): CompletionResult {
  const choice = body.choices[0] ?? ChoiceSchema.parse({});
  const promptTokens = body.usage?.prompt_tokens;
  const cached = body.usage?.prompt_tokens_details?.cached_tokens ?? undefined;
  const evaluated = promptTokens === undefined ? undefined : promptTokens - (cached ?? 0);
  if (prefillOnly) return { text: "", tokens: [], generated: 0, finish: "stop", cached, evaluated };
  const lp = choice.logprobs;
  const logprobs = lp?.tokens?.map((t, i): GeneratedLogprob => ({
    token: tokenId(t),
    logprob: lp.token_logprobs?.[i] ?? -Infinity,
    top: Object.entries(lp.top_logprobs?.[i] ?? {})
      .map(([k, v]) => ({ token: tokenId(k), logprob: v }))
      .sort((a, b) => b.logprob - a.logprob),
  }));
  return {
    text: choice.text ?? "",
    tokens: choice.token_ids ?? undefined,
    generated: choice.token_ids?.length ?? body.usage?.completion_tokens ?? 0,
    finish: choice.finish_reason === "length" ? "length" : "stop",
    cached,
    evaluated,
    ...(logprobs ? { logprobs } : {}),
  };
}
