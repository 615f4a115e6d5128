import { existsSync, realpathSync, statSync } from "node:fs";
import { basename, isAbsolute, resolve } from "node:path";
import { EngineRequestError, UnsupportedFeatureError, type TokenId } from "../../../engine/index.js";
import type { EngineHttp } from "../http/EngineHttp.js";
import type { CompletionRequest, CompletionResult, EngineAdapter, EngineFacts, Flavor, FlavorFeatures, GeneratedLogprob, PreparedAdapter } from "./Flavor.js";

interface ServerAdapter {
  id: number;
  path: string;
  scale: number;
}

interface ProbEntry {
  id: number;
  logprob: number;
  top_logprobs?: { id: number; logprob: number }[];
}

interface CompletionBody {
  content?: string;
  tokens?: number[];
  tokens_predicted?: number;
  stop?: boolean;
  stop_type?: string;
  timings?: { cache_n?: number; prompt_n?: number };
  completion_probabilities?: ProbEntry[];
}

const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return resolve(p);
  }
};

/**
 * llama.cpp's llama-server. Its adapters are the GGUF files it was started with (`--lora`), mapped to the
 * library's versions by path; each request carries the full `lora` list (every adapter with its scale, 0 for the
 * inactive ones), because a request without one takes the server's global scales and keeps a cache computed under
 * other adapters (llama.cpp #26207; README "Remote engines" has the probe). A session owns one slot (`id_slot`),
 * and the server must run with `--cache-ram 0`: its host-memory prompt cache restores states without checking
 * the adapters that computed them.
 */
export class LlamaServerFlavor implements Flavor {
  readonly name = "llama-server" as const;
  readonly title = "llama-server";
  readonly features: FlavorFeatures = {
    runtimeAdapterLoading: false,
    adapterForm: "gguf",
    perRequestScale: true,
    adapterSets: true,
    logProbs: "full",
    grammar: "gbnf",
    cachedTokens: "timings.cache_n / timings.prompt_n",
    cacheStrategy: "rebuild",
    slots: true,
  };
  /** The adapters the server was started with (GET /lora-adapters). */
  protected serverAdapters: ServerAdapter[] = [];
  /**
   * Tokens holding a byte no UTF-8 text has (C0, C1, F5-FF), banned from every generation: llama.cpp's grammar
   * decodes them leniently, and llama-server answers HTTP 500 for output that is not valid UTF-8.
   */
  private neverText: number[] = [];

  async inspect(http: EngineHttp): Promise<EngineFacts> {
    const props = await http.json<{ total_slots?: number; model_path?: string; default_generation_settings?: { n_ctx?: number } }>({ path: "/props" });
    if (typeof props.total_slots !== "number" || typeof props.default_generation_settings?.n_ctx !== "number") {
      throw new EngineRequestError(http.label, 200, "GET /props has no total_slots / default_generation_settings.n_ctx: this is not a llama-server (engine.remote.flavor)");
    }
    const models = await http.json<{ data?: { meta?: { n_vocab?: number } }[] }>({ path: "/v1/models" });
    const vocabularySize = models.data?.[0]?.meta?.n_vocab;
    await this.reset(http);
    if (vocabularySize) this.neverText = await this.tokensWithInvalidBytes(http, vocabularySize);
    return { servedModel: props.model_path ?? "(unnamed)", contextSize: props.default_generation_settings.n_ctx, slots: props.total_slots, vocabularySize };
  }

  /** The vocabulary's bytes come with a full next-token distribution (every token's `bytes`). */
  private async tokensWithInvalidBytes(http: EngineHttp, vocabularySize: number): Promise<number[]> {
    const r = await http.json<{ completion_probabilities?: { top_logprobs?: { id: number; bytes?: number[] }[] }[] }>({
      path: "/completion",
      body: { prompt: " ", n_predict: 1, n_probs: vocabularySize, temperature: 0, cache_prompt: false, reasoning_format: "none", grammar: "root ::= [\\x20-\\x7e]+" },
    });
    const all = r.completion_probabilities?.[0]?.top_logprobs ?? [];
    return all.filter((t) => t.bytes?.some((b) => b === 0xc0 || b === 0xc1 || b >= 0xf5)).map((t) => t.id);
  }

  async reset(http: EngineHttp): Promise<void> {
    this.serverAdapters = await http.json<ServerAdapter[]>({ path: "/lora-adapters" });
  }

  async tokenize(http: EngineHttp, text: string): Promise<TokenId[]> {
    const res = await http.json<{ tokens: TokenId[] }>({ path: "/tokenize", body: { content: text, add_special: false, parse_special: true } });
    return res.tokens;
  }

  /** The server adapter loaded from this file: the same path (resolved, or real), else the only one with its name and size. */
  private find(filePath: string): ServerAdapter | undefined {
    const exact = this.serverAdapters.find((a) => (isAbsolute(a.path) && resolve(a.path) === filePath) || real(a.path) === real(filePath));
    if (exact) return exact;
    const size = statSync(filePath).size;
    const named = this.serverAdapters.filter((a) => basename(a.path) === basename(filePath) && (!existsSync(a.path) || statSync(a.path).size === size));
    return named.length === 1 ? named[0] : undefined;
  }

  async register(http: EngineHttp, adapter: PreparedAdapter): Promise<EngineAdapter> {
    const found = this.find(adapter.filePath);
    if (!found) {
      const loaded = this.serverAdapters.map((a) => a.path).join(", ") || "none";
      throw new UnsupportedFeatureError(
        http.label,
        "loading adapters at runtime",
        `it loads adapters only at start (it has: ${loaded}); restart it with --lora ${adapter.filePath} for ${adapter.version.alias} (README "Remote engines"), or serve through vLLM or SGLang`,
      );
    }
    return { version: adapter.version, handle: found.id, requestScale: adapter.version.scale };
  }

  async unregister(): Promise<void> {
    // llama-server cannot unload an adapter; an unused one costs only its memory
  }

  /** Sets which adapters the request applies: the full list, every adapter the server has at its scale (0 = off). */
  protected async selectAdapters(_http: EngineHttp, body: Record<string, unknown>, active: readonly EngineAdapter[]): Promise<void> {
    body.lora = this.serverAdapters.map((a) => ({ id: a.id, scale: active.find((x) => x.handle === a.id)?.requestScale ?? 0 }));
  }

  async complete(http: EngineHttp, req: CompletionRequest): Promise<CompletionResult> {
    const body: Record<string, unknown> = {
      prompt: req.prompt,
      n_predict: req.maxTokens,
      id_slot: req.slot,
      cache_prompt: !req.fresh,
      temperature: req.temperature,
      return_tokens: true,
      // the output is ours to parse: the server's reasoning parser fails (HTTP 500) on text it cannot read as thinking
      reasoning_format: "none",
      ...(req.seed !== undefined ? { seed: req.seed } : {}),
      ...(req.topK !== undefined ? { top_k: req.topK } : {}),
      ...(req.topP !== undefined ? { top_p: req.topP } : {}),
      ...(req.grammar ? { grammar: req.grammar } : {}),
      ...(req.maxTokens > 0 ? { logit_bias: [...this.neverText.map((t) => [t, false]), ...(req.logitBias ?? [])] } : {}),
      ...(req.topLogprobs ? { n_probs: req.topLogprobs } : {}),
      ...(req.stop?.length ? { stop: req.stop } : {}),
      ...(req.showSpecial?.length ? { preserved_tokens: req.showSpecial } : {}),
    };
    await this.selectAdapters(http, body, req.adapters);
    // streamed only for a caller that shows the text as it comes: the stream drops the ids (and log-probs) of tokens that end inside a character
    const streamed = req.onText !== undefined && !req.topLogprobs && req.maxTokens > 0;
    let final: CompletionBody;
    let text = "";
    if (streamed) {
      final = {};
      await http.stream({ path: "/completion", body: { ...body, stream: true }, signal: req.signal }, (event) => {
        const chunk = event as CompletionBody;
        text += chunk.content ?? "";
        if (chunk.stop) final = chunk;
        else req.onText!(text, chunk.tokens_predicted ?? 0);
      });
    } else {
      final = await http.json<CompletionBody>({ path: "/completion", body, signal: req.signal });
      text = final.content ?? "";
    }
    if (req.maxTokens === 0) return { text: "", tokens: [], generated: 0, finish: "stop", cached: final.timings?.cache_n, evaluated: final.timings?.prompt_n };
    const logprobs = final.completion_probabilities?.map((p): GeneratedLogprob => ({ token: p.id, logprob: p.logprob, top: (p.top_logprobs ?? []).map((t) => ({ token: t.id, logprob: t.logprob })) }));
    return {
      text,
      tokens: streamed ? undefined : final.tokens,
      generated: final.tokens_predicted ?? final.tokens?.length ?? 0,
      finish: final.stop_type === "limit" ? "length" : "stop",
      cached: final.timings?.cache_n,
      evaluated: final.timings?.prompt_n,
      ...(logprobs ? { logprobs } : {}),
    };
  }
}
