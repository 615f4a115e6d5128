// The config file's shape: every key with its bounds and default (docs/configuration.md). Reading a file and resolving
// what it names (paths, the model, the remote engine) is loadConfig.ts.
import { z } from "zod";
import { SoftLimitsSchema, StageBudgetSchema } from "../budgets/budgets.js";

/** The default HTTP body limit (server.maxBodyBytes): a long document pasted as a task fits. */
export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;
/**
 * The cap on long text arguments (a task, a document, a snippet): the default body limit in characters, so that limit
 * decides.
 */
export const LONG_TEXT_MAX = DEFAULT_MAX_BODY_BYTES;

const GpuSchema = z.union([z.enum(["auto", "cuda", "vulkan", "metal"]), z.literal(false)]);

/**
 * The serving engines a remote engine may be (the composition root hands the name to the remote backend, whose type
 * must accept each).
 */
export const REMOTE_FLAVORS = ["llama-server", "vllm", "sglang"] as const;

/** node-llama-cpp's native bindings model.binding may name (the local engine's type must accept each). */
export const BINDINGS = ["prebuilt", "source", "auto"] as const;

/** A serving engine in another process (docs/remote-engines.md). */
export const RemoteEngineConfigSchema = z
  .object({
    /**
     * The engine's base URL, without credentials: they would show in errors, listings and logs (engine.remote.apiKeyEnv
     * names the key).
     */
    url: z
      .string()
      .url()
      .refine(
        (u) => !/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(u),
        "must not carry a user name or password (they would show in errors, listings and logs): put the key in an environment variable named by engine.remote.apiKeyEnv",
      ),
    flavor: z.enum(REMOTE_FLAVORS),
    /** The served base model's name (vLLM, SGLang); default: the first the engine lists. */
    model: z.string().min(1).max(1000).optional(),
    /**
     * PEFT folders for vLLM/SGLang go here, as the engine sees the folder (relative: against the config file, when this
     * server sees it at the same place).
     */
    adapterDir: z.string().min(1).optional(),
    /** The same folder as this server sees it, when the engine mounts it elsewhere. */
    localAdapterDir: z.string().min(1).optional(),
    /**
     * llama-server: the sha256 of each adapter file it was started with, by the path it reports (GET /lora-adapters),
     * for files this server cannot read at that path; the backend maps versions to its adapters by content.
     */
    adapterSha256: z
      .record(z.string().min(1), z.string().regex(/^[0-9a-fA-F]{64}$/, "a sha256 in hex (sha256sum FILE)"))
      .optional(),
    /** Environment variable holding the engine's API key (sent as a bearer token). */
    apiKeyEnv: z.string().min(1).optional(),
    /** Longest wait for the engine's answer, or between two chunks of a streamed one. */
    timeoutMs: z.number().int().positive().max(3_600_000).default(120_000),
    /** Engine requests in flight at once; more wait in line. */
    maxInFlight: z.number().int().positive().max(10_000).default(16),
    /**
     * The longest answer read from the engine (or event of a streamed one), in bytes; a longer one is cancelled as
     * soon as the limit is crossed (default 64 MiB, twice the largest answer the backend asks for). At most 256 MiB:
     * an answer becomes one string, and V8 caps strings at 512 MiB.
     */
    maxResponseBytes: z
      .number()
      .int()
      .min(1024)
      .max(256 * 1024 * 1024)
      .optional(),
    /** Sessions at once (default: llama-server's slots; 64 for vLLM/SGLang). */
    sessions: z.number().int().positive().max(10_000).optional(),
    /** Top log-probs vLLM/SGLang return per position (their --max-logprobs). */
    maxLogprobs: z.number().int().positive().max(1_000_000).optional(),
  })
  .strict();

export const ConfigSchema = z
  .object({
    engine: z
      .object({
        /** "local": llama.cpp in this process (node-llama-cpp); "remote": a serving engine (engine.remote). */
        backend: z.enum(["local", "remote"]).default("local"),
        remote: RemoteEngineConfigSchema.optional(),
      })
      .strict()
      .prefault({}),
    model: z
      .object({
        /** GGUF base model, or a fetched model's name (gemma-3-270m); unset = a demo model (model.demo). */
        path: z.string().min(1).optional(),
        /**
         * Without model.path: "trained", the shipped demo library that learned to choose its weights (models/trained,
         * with its own manifest), or "random", the generated random model the engine tests and the bench use.
         */
        demo: z.enum(["trained", "random"]).default("trained"),
        gpu: GpuSchema.default("auto"),
        gpuLayers: z.union([z.number().int().nonnegative(), z.enum(["auto", "max"])]).default("auto"),
        threads: z.number().int().positive().optional(),
        /**
         * node-llama-cpp's native binding for the local engine: "prebuilt" (shipped in its npm packages), "source" (built
         * on this machine for its CPU with OpenMP by `npm run build:llama-native`; an error when missing) or "auto" (the
         * source build when present and loadable, else the prebuilt).
         */
        binding: z.enum(BINDINGS).default("prebuilt"),
        contextSize: z
          .number()
          .int()
          .min(256)
          .max(1 << 20)
          .default(8192),
        sequencesPerContext: z.number().int().min(1).max(64).default(4),
        maxContexts: z.number().int().min(1).max(64).default(2),
        batchSize: z.number().int().min(1).max(8192).default(512),
        /**
         * Sliding-window models (Gemma 2/3/4, ...): keep every token in the SWA layers' KV cache (true), or a
         * window-sized cache (false: a third of the memory; a cut behind the window evaluates it again; its cells are
         * reused round the window in an order that depends on the session's history, so a session's numbers do too).
         * Default: as model.batchInvariant.
         */
        swaFullCache: z.boolean().optional(),
        /**
         * Local engine on CPU: a session's tokens do not depend on what else the server is doing (no flash attention, a
         * prompt piece decoded in a round of its own, never one prompt token alone because of what a cache held).
         * false: flash attention as llama.cpp chooses and prompt pieces batched with other sessions' decodes.
         */
        batchInvariant: z.boolean().default(true),
        /**
         * How conversations become the model's tokens. "auto": node-llama-cpp's chat wrapper for the GGUF's template
         * (its own rendering of that format; what the shipped libraries were trained on). "jinja": the GGUF's Jinja
         * template itself, tokenized as Hugging Face's apply_chat_template gives it: the tokens an instruction-tuned
         * model was trained on (node-llama-cpp's Qwen wrapper, for one, writes tool results as JSON strings).
         */
        chatTemplate: z.enum(["auto", "jinja"]).default("auto"),
      })
      .strict()
      .prefault({}),
    cache: z
      .object({
        /**
         * "reuse": a KV lane per (session, weight set), so a return to an adapter evaluates only new tokens; "rebuild":
         * re-prefill on every switch (the paper's).
         */
        strategy: z.enum(["reuse", "rebuild"]).default("reuse"),
        /** Folder for idle lanes' spilled KV states (default: a private temporary folder); null keeps none. */
        spillDir: z.string().min(1).nullable().optional(),
        /** Disk budget for spilled states (shared prompt prefixes included), in MiB; the oldest go first. */
        spillMiB: z
          .number()
          .nonnegative()
          .max(1 << 20)
          .default(512),
        /**
         * reuse: evaluate each weight set's prompt prefix (system prompt + function docs) once and start new caches
         * from its saved KV.
         */
        sharedPrefixes: z.boolean().default(true),
        /**
         * reuse: while tools run and between calls, catch up the caches a trajectory needs next (a caller waits at most
         * one background decode).
         */
        background: z.boolean().default(true),
        /**
         * How long one background decode should take (its tokens follow from the measured speed): a caller waits for at
         * most one.
         */
        backgroundDecodeMs: z.number().positive().max(60_000).default(50),
      })
      .strict()
      .prefault({}),
    adapters: z
      .object({
        /** The adapter manifest (JSON); watched: edits apply to the running server. */
        manifest: z.string().min(1).optional(),
        /** Folders adapter files may come from (default: the manifest's folder). */
        allowedDirs: z.array(z.string().min(1)).optional(),
      })
      .strict()
      .prefault({}),
    sessions: z
      .object({
        /**
         * External tool results kept verbatim in what the model reads; older ones become a marker (paper default 5).
         */
        keepToolResults: z.number().int().min(0).max(1000).default(5),
        idleMinutes: z
          .number()
          .positive()
          .max(7 * 24 * 60)
          .default(30),
        maxSessions: z.number().int().positive().max(10_000).default(64),
        maxSessionsPerClient: z.number().int().positive().max(10_000).default(16),
        /** Model calls waiting on the engine before new ones are refused as busy. */
        maxQueuedGenerations: z.number().int().positive().max(10_000).default(32),
        /** Model calls one client may have waiting; the queue serves clients round-robin. */
        maxQueuedPerClient: z.number().int().positive().max(10_000).default(8),
        /**
         * Engine session slots one client may hold (default: model.maxContexts x model.sequencesPerContext minus one,
         * so another client always finds one).
         */
        maxSlotsPerClient: z.number().int().positive().max(10_000).optional(),
        defaultMaxTokens: z
          .number()
          .int()
          .positive()
          .max(1 << 20)
          .default(512),
      })
      .strict()
      .prefault({}),
    tools: z
      .object({
        search: z
          .object({
            backend: z.enum(["local", "searxng", "brave"]).default("local"),
            /** Folder of .md/.txt/.html/.jsonl documents for the local index (default: the shipped corpus). */
            corpus: z.string().min(1).optional(),
            /** Where the local index is persisted (default: .weact/search-index.json). */
            indexFile: z.string().min(1).optional(),
            /**
             * Results when a call names no top_k: few, so a small model's window holds them (train-demo records its
             * trajectories with this default).
             */
            defaultTopK: z.number().int().min(1).max(50).default(3),
            maxTopK: z.number().int().min(1).max(100).default(20),
            timeoutMs: z.number().int().positive().max(120_000).default(10_000),
            retries: z.number().int().min(0).max(5).default(2),
            searxng: z.object({ url: z.string().url() }).strict().optional(),
            brave: z
              .object({
                url: z.string().url().default("https://api.search.brave.com"),
                apiKeyEnv: z.string().min(1).default("BRAVE_API_KEY"),
              })
              .strict()
              .optional(),
          })
          .strict()
          .prefault({}),
        read: z
          .object({
            maxChars: z.number().int().min(100).max(10_000_000).default(20_000),
            maxBytes: z.number().int().min(1024).max(100_000_000).default(5_000_000),
            timeoutMs: z.number().int().positive().max(120_000).default(15_000),
            maxRedirects: z.number().int().min(0).max(20).default(5),
            /** Fetch loopback/private addresses too (off: the server never becomes a proxy into its own network). */
            allowPrivateAddresses: z.boolean().default(false),
          })
          .strict()
          .prefault({}),
        runCode: z
          .object({
            enabled: z.boolean().default(true),
            defaultTimeoutS: z.number().positive().max(600).default(10),
            maxTimeoutS: z.number().positive().max(600).default(60),
            memoryMb: z.number().int().min(32).max(65_536).default(512),
            maxOutputBytes: z.number().int().min(1024).max(10_000_000).default(65_536),
            /**
             * Offer run_code over HTTP with tokens even without a jail: every client can then read the server's files
             * (tokens, config, traces) and reach its network.
             */
            unsafeUnjailedOnSharedServer: z.boolean().default(false),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
    harness: z
      .object({
        /** The hard policy's prescribed stages. */
        workflow: z.array(z.string().min(1)).min(1).default(["plan", "search", "write"]),
        /** Stage budgets below run arguments and manifest entries, above the built-in defaults. */
        stage: StageBudgetSchema.partial().default({}),
        soft: SoftLimitsSchema.partial().default({}),
        maxTokensPerTurn: z
          .number()
          .int()
          .positive()
          .max(1 << 20)
          .default(512),
        /**
         * Tokens of the context window a stage keeps free for its release exchange (hard: also one per later stage).
         */
        contextReserveTokens: z
          .number()
          .int()
          .min(0)
          .max(1 << 20)
          .default(256),
        /** Where trajectory traces (JSONL) are written (default: .weact/traces). */
        traceDir: z.string().min(1).optional(),
        /** Trace files kept in traceDir; past it the least recently written are deleted as new runs start. */
        maxTraceFiles: z.number().int().positive().max(10_000_000).default(1000),
        /**
         * MiB one client's traces may take in traceDir (a trace's size follows its task and tool results, so a count
         * alone let one client keep gigabytes); past it that client's least recently written are deleted as its new
         * runs start, never another's.
         */
        maxTraceMiBPerClient: z
          .number()
          .positive()
          .max(1 << 20)
          .default(256),
      })
      .strict()
      .prefault({}),
    server: z
      .object({
        host: z.string().min(1).default("127.0.0.1"),
        port: z.number().int().min(0).max(65535).default(7331),
        /** Host headers accepted besides the bound host (DNS-rebinding protection is always on). */
        allowedHosts: z.array(z.string().min(1)).optional(),
        /** File of bearer tokens, one per line as "name:token" or just "token"; required off loopback. */
        tokenFile: z.string().min(1).optional(),
        /** Tokens (same format) that may also change the adapter library over HTTP. */
        adminTokenFile: z.string().min(1).optional(),
        /** Largest request body read (JSON), in bytes; checked after authentication. */
        maxBodyBytes: z
          .number()
          .int()
          .min(1024)
          .max(1 << 30)
          .default(DEFAULT_MAX_BODY_BYTES),
        /**
         * How long a client has to send a whole request, headers and body; one still arriving then is answered 408
         * and its connection closed (a body that never ends would otherwise hold its socket for minutes).
         */
        bodyTimeoutSeconds: z.number().int().min(1).max(3600).default(30),
        /** Open MCP connections (Streamable HTTP and SSE) per token. */
        maxConnectionsPerClient: z.number().int().positive().max(100_000).default(16),
        /** Open MCP connections in all (the cap without tokens). */
        maxConnections: z.number().int().positive().max(100_000).default(256),
        /** An MCP connection with no request for this long is closed and its memory freed. */
        connectionIdleSeconds: z
          .number()
          .positive()
          .max(7 * 24 * 3600)
          .default(1800),
        /**
         * How often an open MCP event stream (the `GET /mcp` stream, the legacy SSE stream) gets an SSE comment, so
         * proxies with an idle timeout (nginx: 60 s) do not cut a quiet stream.
         */
        streamKeepaliveSeconds: z.number().positive().max(3600).default(20),
        /** Live status page logins (the token form) per token; past it, that token's oldest login ends. */
        maxStatusLoginsPerClient: z.number().int().positive().max(10_000).default(8),
        /** Live status page logins in all; past it, a new login is refused (429) until some log out or expire. */
        maxStatusLogins: z.number().int().positive().max(1_000_000).default(256),
      })
      .strict()
      .prefault({}),
    openai: z
      .object({
        /**
         * A chat completion that stopped on the client's tools keeps its run (and session slot) this long for the
         * continuation.
         */
        continuationSeconds: z
          .number()
          .positive()
          .max(24 * 3600)
          .default(300),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type Config = z.infer<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;
