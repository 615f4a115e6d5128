import { join } from "node:path";
import type { FunctionSpec } from "../engine/index.js";
import type { Config } from "../config/configSchema.js";
import type { Logger } from "../log.js";
import { DEFAULT_CORPUS, STATE_DIR } from "../paths.js";
import type { ExternalTool } from "./ExternalTool.js";
import { readTool } from "./read/readTool.js";
import { DEFAULT_RUN_CODE_LIMITS, detectIsolation, hidingPaths } from "./runCode/index.js";
import { runCodeTool } from "./runCode/runCodeTool.js";
import { BraveBackend } from "./search/backends/brave.js";
import { SearxngBackend } from "./search/backends/searxng.js";
import { LocalIndex } from "./search/LocalIndex.js";
import { searchTool } from "./search/searchTool.js";
import type { SearchBackend } from "./search/types.js";

export type ToolsConfig = Config["tools"];

export class ToolConfigError extends Error {}

export interface ToolboxOptions {
  /** Served to several clients (HTTP with tokens): run_code is then offered only inside a jail, unless opted in. */
  shared?: boolean;
  /** The server's own files and folders (config, tokens, traces, manifest, ...), hidden from run_code's jail. */
  private?: readonly string[];
}

/** A tool this server could offer but does not, and why (shown in the log, list_adapters and create_session). */
export interface WithdrawnTool {
  name: string;
  reason: string;
}

/** The external tools this server offers, built from the config; each is both an MCP tool and a model function. */
export class Toolbox {
  private constructor(
    readonly tools: ReadonlyMap<string, ExternalTool>,
    private readonly closers: (() => void)[],
    readonly withdrawn: readonly WithdrawnTool[] = [],
  ) {}

  static async create(config: ToolsConfig, logger: Logger, options: ToolboxOptions = {}): Promise<Toolbox> {
    const closers: (() => void)[] = [];
    const local =
      config.search.backend === "local"
        ? LocalIndex.open(
            config.search.corpus ?? DEFAULT_CORPUS,
            config.search.indexFile ?? join(STATE_DIR, "search-index.json"),
            logger,
          )
        : undefined;
    if (local) closers.push(() => local.close());
    const backend: SearchBackend = local ?? Toolbox.webBackend(config.search);
    const tools: ExternalTool[] = [
      searchTool(backend, config.search),
      readTool({ ...config.read, document: (id) => local?.document(id) }),
    ];
    const withdrawn: WithdrawnTool[] = [];
    if (config.runCode.enabled) {
      const isolation = await hidingPaths(await detectIsolation(), options.private ?? []);
      const { enabled: _enabled, unsafeUnjailedOnSharedServer: optedIn, ...limits } = config.runCode;
      const contained = isolation.enforces.filesystem && isolation.enforces.network;
      if (options.shared && !contained && !optedIn) {
        const reason = `run_code is withdrawn: this server is shared (HTTP with tokens) and its sandbox is at the ${isolation.level} level, which does not keep a snippet from the server's files, tokens and network. ${isolation.detail.split(".")[0]}. Install bubblewrap (bwrap on PATH), or set tools.runCode.unsafeUnjailedOnSharedServer to offer it anyway.`;
        withdrawn.push({ name: "run_code", reason });
        logger.warn({ isolation: isolation.level }, reason);
      } else {
        tools.push(runCodeTool(isolation, { ...DEFAULT_RUN_CODE_LIMITS, ...limits }));
        const log = options.shared && !contained ? logger.warn.bind(logger) : logger.info.bind(logger);
        log(
          {
            isolation: isolation.level,
            enforces: isolation.enforces,
            hidden: isolation.jail?.masks?.map((m) => m.path),
            detail: isolation.detail,
          },
          options.shared && !contained
            ? "run_code offered on a shared server WITHOUT a jail (tools.runCode.unsafeUnjailedOnSharedServer): every client can read the server's files and use its network"
            : "run_code sandbox",
        );
      }
    }
    logger.info(
      { search: backend.name, documents: local?.size, tools: tools.map((t) => t.name) },
      "external tools ready",
    );
    return new Toolbox(new Map(tools.map((t) => [t.name, t])), closers, withdrawn);
  }

  private static webBackend(search: ToolsConfig["search"]): SearchBackend {
    if (search.backend === "searxng")
      return new SearxngBackend({ url: search.searxng!.url, timeoutMs: search.timeoutMs, retries: search.retries });
    const brave = search.brave ?? { url: "https://api.search.brave.com", apiKeyEnv: "BRAVE_API_KEY" };
    const apiKey = process.env[brave.apiKeyEnv];
    if (!apiKey)
      throw new ToolConfigError(
        `tools.search.backend is "brave" but the environment variable ${brave.apiKeyEnv} (tools.search.brave.apiKeyEnv) holds no API key`,
      );
    return new BraveBackend({ url: brave.url, apiKey, timeoutMs: search.timeoutMs, retries: search.retries });
  }

  /** The functions the local model reads for these tools. */
  modelFunctions(): Record<string, FunctionSpec> {
    return Object.fromEntries(
      [...this.tools.values()].map((t) => [t.name, { description: t.description, parameters: t.modelParameters }]),
    );
  }

  close(): void {
    for (const close of this.closers) close();
  }
}
