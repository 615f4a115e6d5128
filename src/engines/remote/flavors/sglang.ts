import { z } from "zod";
import {
  AdapterCapacityError,
  EngineRequestError,
  UnsupportedFeatureError,
  type TokenId,
} from "../../../engine/index.js";
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
/** [logprob, token id, text or null], as SGLang's meta_info lists them (a log-prob JSON cannot write is null). */
const LogprobEntry = z
  .tuple([z.number().nullable(), Int], z.unknown())
  .transform(([logprob, token]) => ({ logprob: logprob ?? -Infinity, token }));
/** A /generate answer, or one streamed chunk (each carries the whole text so far). */
const GenerateSchema = z.object({
  text: z.string().default(""),
  output_ids: z.array(Int).nullish(),
  meta_info: z
    .object({
      prompt_tokens: Int.optional(),
      completion_tokens: Int.optional(),
      cached_tokens: Int.optional(),
      finish_reason: z.object({ type: z.string().optional() }).nullish(),
      output_token_logprobs: z.array(LogprobEntry).nullish(),
      output_top_logprobs: z.array(z.array(LogprobEntry).nullable()).nullish(),
    })
    .default({}),
});
type GenerateBody = z.infer<typeof GenerateSchema>;
const ServerInfoSchema = z.object({ context_length: Int.positive().optional() });

/**
 * SGLang's native API. Adapters are PEFT folders under engine.remote.adapterDir, loaded at runtime under their
 * versioned names (`POST /load_lora_adapter`) and unloaded when no session holds them; a request selects one with
 * `lora_path`. Prompts go as `input_ids` to /generate with the grammar as `ebnf` (xgrammar reads GBNF);
 * `meta_info.cached_tokens` says how much of the prompt its radix cache (keyed by adapter) served.
 */
export class SglangFlavor implements Flavor {
  readonly name = "sglang" as const;
  readonly title = "SGLang";
  readonly features: FlavorFeatures = {
    ...PEFT_ENGINE_FEATURES,
    contextLimit: "serve a longer --context-length, then raise model.contextSize",
  };

  async inspect(http: EngineHttp, model: string | undefined): Promise<EngineFacts> {
    const served = await servedBaseModel(http, model);
    let contextSize = served.contextSize;
    if (!contextSize) {
      const info = await http.answer({ path: "/get_server_info" }, ServerInfoSchema);
      contextSize = info.context_length;
    }
    if (!contextSize)
      throw new EngineRequestError(
        http.label,
        200,
        "neither GET /v1/models nor GET /get_server_info gives the context length: is this SGLang (engine.remote.flavor)?",
      );
    return { servedModel: served.id, contextSize };
  }

  async reset(): Promise<boolean> {
    // a restart loses the runtime-loaded adapters, which a request naming one finds out (AdapterLostError)
    return false;
  }

  async tokenize(http: EngineHttp, text: string): Promise<TokenId[] | undefined> {
    const res = await http.json(
      { path: "/tokenize", body: { prompt: text, add_special_tokens: false } },
      TokenizeSchema,
      (r) => r.status === 404,
    );
    return res?.tokens;
  }

  async register(http: EngineHttp, adapter: PreparedAdapter): Promise<EngineAdapter> {
    const { name, enginePath } = adapter.peft!;
    let refused: { status: number; detail: string } | undefined;
    await http.json(
      { path: "/load_lora_adapter", body: { lora_name: name, lora_path: enginePath } },
      z.unknown(),
      ({ status, body }) => {
        refused = { status, detail: isMissingRoute(status, body) ? "no /load_lora_adapter route" : errorDetail(body) };
        return true;
      },
    );
    if (refused && refused.status >= 400) {
      const { status, detail } = refused;
      // the versioned name is content-addressed: loaded already means these very weights
      if (/already (been )?loaded|already exists/i.test(detail))
        return { version: adapter.version, handle: name, requestScale: 1 };
      if (/maximum number of loaded lora adapters/i.test(detail)) throw new AdapterCapacityError(http.label, detail);
      if (/not enabled|enable.lora|no \/load_lora_adapter route/i.test(detail)) {
        throw new UnsupportedFeatureError(
          http.label,
          "loading adapters at runtime here",
          'start it with --enable-lora --max-lora-rank R --lora-target-modules all (README "Remote engines")',
        );
      }
      throw new EngineRequestError(http.label, status, detail);
    }
    return { version: adapter.version, handle: name, requestScale: 1 };
  }

  async unregister(http: EngineHttp, adapter: EngineAdapter): Promise<void> {
    await http.json(
      { path: "/unload_lora_adapter", body: { lora_name: adapter.handle } },
      z.unknown(),
      ({ status }) => status === 400 || status === 404,
    );
  }

  body(req: CompletionRequest): Record<string, unknown> {
    return {
      input_ids: req.prompt,
      lora_path: req.adapters[0]?.handle ?? null,
      sampling_params: {
        // SGLang evaluates the prompt into its cache with max_new_tokens 0
        max_new_tokens: req.maxTokens,
        temperature: req.temperature,
        skip_special_tokens: false,
        spaces_between_special_tokens: false,
        ...(req.seed !== undefined ? { sampling_seed: req.seed } : {}),
        ...(req.topK !== undefined ? { top_k: req.topK } : {}),
        ...(req.topP !== undefined ? { top_p: req.topP } : {}),
        ...(req.grammar ? { ebnf: req.grammar } : {}),
        ...(req.logitBias?.size
          ? { logit_bias: Object.fromEntries([...req.logitBias].map(([t, b]) => [String(t), b])) }
          : {}),
        ...(req.stop?.length ? { stop: req.stop } : {}),
      },
      ...(req.topLogprobs ? { return_logprob: true, top_logprobs_num: req.topLogprobs } : {}),
    };
  }

  async complete(http: EngineHttp, req: CompletionRequest): Promise<CompletionResult> {
    const body = this.body(req);
    let final: GenerateBody;
    try {
      if (req.onText && !req.topLogprobs && req.maxTokens > 0) {
        final = GenerateSchema.parse({});
        // each streamed chunk carries the whole text so far
        await http.stream(
          { path: "/generate", body: { ...body, stream: true }, signal: req.signal },
          GenerateSchema,
          (chunk) => {
            final = chunk;
            req.onText!(chunk.text, chunk.meta_info.completion_tokens ?? 0);
          },
        );
      } else {
        final = await http.answer({ path: "/generate", body, signal: req.signal }, GenerateSchema);
      }
    } catch (err) {
      if (
        err instanceof EngineRequestError &&
        req.adapters.length > 0 &&
        /lora/i.test(err.detail) &&
        /not (been )?loaded|not found|unknown/i.test(err.detail)
      )
        throw new AdapterLostError(err.detail);
      throw err;
    }
    return readGenerate(final, req.maxTokens === 0);
  }
}

/** SGLang's /generate answer (or its last streamed chunk) as a result. */
function readGenerate(body: GenerateBody, prefillOnly: boolean): CompletionResult {
  const meta = body.meta_info;
  const cached = meta.cached_tokens;
  const evaluated = meta.prompt_tokens === undefined ? undefined : meta.prompt_tokens - (cached ?? 0);
  if (prefillOnly) return { text: "", tokens: [], generated: 0, finish: "stop", cached, evaluated };
  const logprobs = meta.output_token_logprobs?.map(({ logprob, token }, i): GeneratedLogprob => ({
    token,
    logprob,
    top: [...(meta.output_top_logprobs?.[i] ?? [])].sort((a, b) => b.logprob - a.logprob),
  }));
  return {
    text: body.text,
    tokens: body.output_ids ?? undefined,
    generated: body.output_ids?.length ?? meta.completion_tokens ?? 0,
    finish: meta.finish_reason?.type === "length" ? "length" : "stop",
    cached,
    evaluated,
    ...(logprobs ? { logprobs } : {}),
  };
}
