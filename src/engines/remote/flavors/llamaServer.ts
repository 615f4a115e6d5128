import { stat } from "node:fs/promises";
import { basename, resolve } from "node:path";
import { z } from "zod";
import { UnsupportedFeatureError, type TokenId } from "../../../engine/index.js";
import { sha256File } from "../../../gguf/index.js";
import type { EngineHttp } from "../client/EngineHttp.js";
import { ONE_CHARACTER } from "../turn/grammar.js";
import type {
  CompletionRequest,
  CompletionResult,
  EngineAdapter,
  EngineFacts,
  Flavor,
  FlavorFeatures,
  GeneratedLogprob,
  PreparedAdapter,
} from "./Flavor.js";

const Int = z.number().int();
const PropsSchema = z.object({
  total_slots: Int.positive(),
  model_path: z.string().optional(),
  default_generation_settings: z.object({ n_ctx: Int.positive() }),
});
const ModelsSchema = z.object({ data: z.array(z.object({ meta: z.object({ n_vocab: Int.positive() }).optional() })) });
const LoraAdaptersSchema = z.array(z.object({ id: Int.nonnegative(), path: z.string(), scale: z.number() }));
const TokenizeSchema = z.object({ tokens: z.array(Int) });
const VocabularySchema = z.object({
  completion_probabilities: z
    .array(z.object({ top_logprobs: z.array(z.object({ id: Int, bytes: z.array(Int).optional() })) }))
    .min(1),
});
/** A log-prob; JSON has no -Infinity and the server writes null for it. */
const LogProb = z
  .number()
  .nullable()
  .transform((v) => v ?? -Infinity);
const CompletionSchema = z.object({
  content: z.string().default(""),
  tokens: z.array(Int).optional(),
  tokens_predicted: Int.optional(),
  stop: z.boolean().optional(),
  stop_type: z.string().optional(),
  timings: z.object({ cache_n: Int.optional(), prompt_n: Int.optional() }).optional(),
  completion_probabilities: z
    .array(
      z.object({
        id: Int,
        logprob: LogProb,
        top_logprobs: z.array(z.object({ id: Int, logprob: LogProb })).optional(),
      }),
    )
    .optional(),
});
type CompletionBody = z.infer<typeof CompletionSchema>;

/** An adapter the server was started with, and the sha256 of the file it loaded (undefined: not known here). */
interface ServerAdapter {
  id: number;
  path: string;
  scale: number;
  sha256?: string;
}

/** Two prompts without a common prefix for the host-cache probe (any vocabulary has these ids). */
const PROBE_A = Array.from({ length: 24 }, (_, i) => 10 + i);
const PROBE_B = Array.from({ length: 24 }, (_, i) => 40 + i);

/**
 * llama.cpp's llama-server. Its adapters are the GGUF files it was started with (`--lora`), mapped to the
 * library's versions by content: the sha256 of each file it loaded, hashed here when the file is readable at the
 * path it reports (else given in engine.remote.adapterSha256). Each request carries the full `lora` list (every
 * adapter with its scale, 0 for the inactive ones), because a request without one takes the server's global
 * scales and keeps a cache computed under other adapters (llama.cpp #26207; README "Remote engines" has the
 * probe). A session owns one slot (`id_slot`), and the server must run without its host-memory prompt cache
 * (`--cache-ram 0`), which restores states without checking the adapters that computed them: connect refuses a
 * server that has it.
 *
 * The contents are hashed once per server process, since the server keeps the weights it loaded whatever
 * happens to the files later. To know the process, the backend marks it: the global scale of adapter 0 is set
 * to -0 (a scale that applies nothing; this backend's requests never use the global scales), which a restarted
 * server reports as +0 or its --lora scale again. The server must serve this backend alone.
 */
export class LlamaServerFlavor implements Flavor {
  readonly name = "llama-server" as const;
  readonly title = "llama-server";
  readonly features: FlavorFeatures = {
    runtimeAdapterLoading: false,
    adapterForm: "gguf",
    adapterSets: true,
    // from the token before the invocation (llama.cpp's server); docs/remote-engines.md says where that differs
    alora: true,
    logProbs: "full",
    // its n_probs are the sampler's input, before the grammar
    grammarMasksLogprobs: false,
    baseAsZeroAdapter: false,
    cacheStrategy: "rebuild",
    slots: true,
    contextLimit:
      "give llama-server more context per slot (-c is shared by its -np slots), then raise model.contextSize",
  };
  /** The adapters the server was started with (GET /lora-adapters), with the contents it loaded. */
  protected serverAdapters: ServerAdapter[] = [];
  /** The adapters were read once, and the server marked (when it has any). */
  private read = false;
  /** Content hashes by file, kept while the file's identity (device, inode, size, times) is the same. */
  private readonly hashes = new Map<string, { stamp: string; sha256: string }>();
  /**
   * Tokens holding a byte no UTF-8 text has (C0, C1, F5-FF), banned from every generation: llama.cpp's grammar
   * decodes them leniently, and llama-server answers HTTP 500 for output that is not valid UTF-8.
   */
  private neverText: number[] = [];

  constructor(
    /**
     * The sha256 of adapter files by the path the server reports, for files not readable here
     * (engine.remote.adapterSha256).
     */
    private readonly knownContents: Readonly<Record<string, string>> = {},
  ) {}

  async inspect(http: EngineHttp): Promise<EngineFacts> {
    const props = await http.answer({ path: "/props" }, PropsSchema);
    const models = await http.answer({ path: "/v1/models" }, ModelsSchema);
    const vocabularySize = models.data[0]?.meta?.n_vocab;
    await this.reset(http, 0);
    if (vocabularySize) this.neverText = await this.tokensWithInvalidBytes(http, vocabularySize);
    return {
      servedModel: props.model_path ?? "(unnamed)",
      contextSize: props.default_generation_settings.n_ctx,
      slots: props.total_slots,
      vocabularySize,
    };
  }

  /** The vocabulary's bytes come with a full next-token distribution (every token's `bytes`). */
  private async tokensWithInvalidBytes(http: EngineHttp, vocabularySize: number): Promise<number[]> {
    const r = await http.answer(
      {
        path: "/completion",
        body: {
          prompt: " ",
          n_predict: 1,
          n_probs: vocabularySize,
          temperature: 0,
          id_slot: 0,
          cache_prompt: false,
          lora: this.loraList([]),
          reasoning_format: "none",
          grammar: "root ::= [\\x20-\\x7e]+",
        },
      },
      VocabularySchema,
    );
    return r.completion_probabilities[0]!.top_logprobs.filter((t) =>
      t.bytes?.some((b) => b === 0xc0 || b === 0xc1 || b >= 0xf5),
    ).map((t) => t.id);
  }

  async reset(http: EngineHttp, freeSlot: number): Promise<boolean> {
    const listed = await http.answer({ path: "/lora-adapters" }, LoraAdaptersSchema);
    const same =
      this.read &&
      listed.length === this.serverAdapters.length &&
      listed.every((a, i) => a.id === this.serverAdapters[i]!.id && a.path === this.serverAdapters[i]!.path);
    // without adapters there is nothing to mark, and nothing a restart could map wrongly
    if (same && (!listed.length || Object.is(listed[0]!.scale, -0))) return false;
    await this.refuseHostCache(
      http,
      freeSlot,
      listed.map((a) => ({ id: a.id, scale: 0 })),
    );
    this.serverAdapters = await Promise.all(listed.map(async (a) => ({ ...a, sha256: await this.contentOf(a.path) })));
    this.read = true;
    if (listed.length) {
      // every global scale off (no path of this backend uses them); JSON.stringify writes -0 as 0: the marker goes as
      // text
      const scales = listed.map((a, i) => `{"id":${a.id},"scale":${i === 0 ? "-0.0" : "0"}}`);
      await http.answer({ path: "/lora-adapters", bodyText: `[${scales.join(",")}]` }, z.unknown());
    }
    return true;
  }

  /**
   * The sha256 of the file the server loaded from `path`: engine.remote.adapterSha256's, or this machine's file at that
   * path; undefined when neither.
   */
  private async contentOf(path: string): Promise<string | undefined> {
    const given = this.knownContents[path];
    if (given) return given.toLowerCase();
    const file = resolve(path);
    // only a regular file is read: a FIFO at that path would hold the read forever
    const s = await stat(file).catch(() => undefined);
    if (!s?.isFile()) return undefined;
    const stamp = `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
    const known = this.hashes.get(file);
    if (known?.stamp === stamp) return known.sha256;
    const sha256 = await sha256File(file).catch(() => undefined);
    if (sha256) this.hashes.set(file, { stamp, sha256 });
    return sha256;
  }

  /**
   * The host-memory prompt cache (--cache-ram, 8192 MiB by default) saves a slot's state when another prompt
   * replaces it and loads it back for a prompt it fits, whatever adapters computed it. Probe: prompt A, then B
   * (A is saved), then A again on the same slot: only a host cache gives A's tokens back.
   */
  private async refuseHostCache(http: EngineHttp, slot: number, lora: { id: number; scale: number }[]): Promise<void> {
    const evaluate = (prompt: number[]) =>
      http.answer(
        {
          path: "/completion",
          body: {
            prompt,
            n_predict: 0,
            id_slot: slot,
            cache_prompt: true,
            lora,
            reasoning_format: "none",
            grammar: ONE_CHARACTER,
          },
        },
        CompletionSchema,
      );
    await evaluate(PROBE_A);
    await evaluate(PROBE_B);
    const again = await evaluate(PROBE_A);
    if ((again.timings?.cache_n ?? 0) > 0) {
      throw new UnsupportedFeatureError(
        http.label,
        "a host-memory prompt cache",
        `it gave back ${again.timings!.cache_n} tokens of a prompt its slot no longer held, and restores such states without checking the adapters that computed them (llama.cpp #26207): restart llama-server with --cache-ram 0 (README "Remote engines")`,
      );
    }
  }

  async tokenize(http: EngineHttp, text: string): Promise<TokenId[]> {
    return (
      await http.answer(
        { path: "/tokenize", body: { content: text, add_special: false, parse_special: true } },
        TokenizeSchema,
      )
    ).tokens;
  }

  async register(http: EngineHttp, adapter: PreparedAdapter): Promise<EngineAdapter> {
    const found = this.serverAdapters.find((a) => a.sha256 === adapter.version.sha256);
    if (!found) throw this.notServed(http, adapter);
    return { version: adapter.version, handle: found.id, requestScale: adapter.version.scale };
  }

  /** Why no adapter of the server has these contents, and what would serve them. */
  private notServed(http: EngineHttp, adapter: PreparedAdapter): UnsupportedFeatureError {
    const file = adapter.filePath;
    const short = (sha: string) => `${sha.slice(0, 12)}…`;
    const changed = this.serverAdapters.find(
      (a) => a.sha256 && (resolve(a.path) === file || basename(a.path) === basename(file)),
    );
    if (changed) {
      return new UnsupportedFeatureError(
        http.label,
        "an adapter file that changed after it started",
        `it loaded ${changed.path} with other contents (sha256 ${short(changed.sha256!)}; ${file} is ${short(adapter.version.sha256)}) and keeps serving those weights: restart llama-server with --lora ${file} to serve the new ones`,
      );
    }
    const unknown = this.serverAdapters.filter((a) => !a.sha256).map((a) => a.path);
    const loaded = this.serverAdapters.map((a) => a.path).join(", ") || "none";
    const unreadable = unknown.length
      ? `; it has adapters this server cannot read to compare (${unknown.join(", ")}): give their sha256 in engine.remote.adapterSha256`
      : "";
    return new UnsupportedFeatureError(
      http.label,
      "loading adapters at runtime",
      `it loads adapters only at start (it has: ${loaded}); restart it with --lora ${file} for ${adapter.version.alias} (README "Remote engines"), or serve through vLLM or SGLang${unreadable}`,
    );
  }

  async unregister(): Promise<void> {
    // llama-server cannot unload an adapter; an unused one costs only its memory
  }

  /** The full `lora` list: every adapter the server has, at the active ones' scales (0 = off). */
  protected loraList(active: readonly EngineAdapter[]): { id: number; scale: number }[] {
    return this.serverAdapters.map((a) => ({
      id: a.id,
      scale: active.find((x) => x.handle === a.id)?.requestScale ?? 0,
    }));
  }

  /** Sets which adapters the request applies. */
  protected async selectAdapters(
    _http: EngineHttp,
    body: Record<string, unknown>,
    active: readonly EngineAdapter[],
  ): Promise<void> {
    body.lora = this.loraList(active);
  }

  /** Whether the engine may continue from the slot's cache: only where the session knows what it holds. */
  protected cachePrompt(req: CompletionRequest): boolean {
    return req.reuse !== undefined;
  }

  async complete(http: EngineHttp, req: CompletionRequest): Promise<CompletionResult> {
    const body: Record<string, unknown> = {
      prompt: req.prompt,
      n_predict: req.maxTokens,
      id_slot: req.slot,
      // off unless the session knows what its slot holds: whatever else is there is evaluated again
      cache_prompt: this.cachePrompt(req),
      // never chunks of the slot's cache shifted into place (--cache-reuse): they may hold other weights' KV (an
      // activated LoRA's slot keeps the base's up to its point, and what lies after is not checked)
      n_cache_reuse: 0,
      temperature: req.temperature,
      return_tokens: true,
      // the output is ours to parse: the server's reasoning parser fails (HTTP 500) on text it cannot read as thinking
      reasoning_format: "none",
      ...(req.seed !== undefined ? { seed: req.seed } : {}),
      ...(req.topK !== undefined ? { top_k: req.topK } : {}),
      ...(req.topP !== undefined ? { top_p: req.topP } : {}),
      ...(req.grammar ? { grammar: req.grammar } : {}),
      ...(req.maxTokens > 0
        ? { logit_bias: [...this.neverText.map((t) => [t, false]), ...(req.logitBias ?? [])] }
        : {}),
      ...(req.topLogprobs ? { n_probs: req.topLogprobs } : {}),
      ...(req.stop?.length ? { stop: req.stop } : {}),
      ...(req.showSpecial?.length ? { preserved_tokens: req.showSpecial } : {}),
    };
    await this.selectAdapters(http, body, req.adapters);
    // streamed only for a caller that shows the text as it comes: the stream drops the ids (and log-probs) of tokens
    // that end inside a character
    const streamed = req.onText !== undefined && !req.topLogprobs && req.maxTokens > 0;
    let final: CompletionBody | undefined;
    let text = "";
    if (streamed) {
      await http.stream(
        { path: "/completion", body: { ...body, stream: true }, signal: req.signal },
        CompletionSchema,
        (chunk) => {
          text += chunk.content;
          if (chunk.stop) final = chunk;
          else req.onText!(text, chunk.tokens_predicted ?? 0);
        },
      );
    } else {
      final = await http.answer({ path: "/completion", body, signal: req.signal }, CompletionSchema);
      text = final.content;
    }
    const cached = final?.timings?.cache_n;
    const evaluated = final?.timings?.prompt_n;
    if (req.maxTokens === 0) return { text: "", tokens: [], generated: 0, finish: "stop", cached, evaluated };
    const logprobs = final?.completion_probabilities?.map((p): GeneratedLogprob => ({
      token: p.id,
      logprob: p.logprob,
      top: (p.top_logprobs ?? []).map((t) => ({ token: t.id, logprob: t.logprob })),
    }));
    return {
      text,
      tokens: streamed ? undefined : final?.tokens,
      generated: final?.tokens_predicted ?? final?.tokens?.length ?? 0,
      finish: final?.stop_type === "limit" ? "length" : "stop",
      cached,
      evaluated,
      ...(logprobs ? { logprobs } : {}),
    };
  }
}
