import { join } from "node:path";
import type { FunctionSpec } from "../../native/index.js";
import type { Config } from "../config/config.js";
import type { Logger } from "../log.js";
import { DEFAULT_CORPUS, STATE_DIR } from "../paths.js";
import type { ExternalTool } from "./ExternalTool.js";
import { readTool } from "./read/readTool.js";
import { DEFAULT_RUN_CODE_LIMITS, detectIsolation } from "./runCode/index.js";
import { runCodeTool } from "./runCode/runCodeTool.js";
import { BraveBackend } from "./search/backends/brave.js";
import { SearxngBackend } from "./search/backends/searxng.js";
import { LocalIndex } from "./search/LocalIndex.js";
import { searchTool } from "./search/searchTool.js";
import type { SearchBackend } from "./search/types.js";

export type ToolsConfig = Config["tools"];

export class ToolConfigError extends Error {}

/** The external tools this server offers, built from the config; each is both an MCP tool and a model function. */
export class Toolbox {
  private constructor(
    readonly tools: ReadonlyMap<string, ExternalTool>,
    private readonly closers: (() => void)[],
  ) {}

  static async create(config: ToolsConfig, logger: Logger): Promise<Toolbox> {
    const closers: (() => void)[] = [];
    const local = config.search.backend === "local" ? LocalIndex.open(config.search.corpus ?? DEFAULT_CORPUS, config.search.indexFile ?? join(STATE_DIR, "search-index.json"), logger) : undefined;
    if (local) closers.push(() => local.close());
    const backend: SearchBackend = local ?? Toolbox.webBackend(config.search);
    const tools: ExternalTool[] = [
      searchTool(backend, config.search),
      readTool({ ...config.read, document: (id) => local?.document(id) }),
    ];
    if (config.runCode.enabled) {
      const isolation = await detectIsolation();
      const { enabled: _enabled, ...limits } = config.runCode;
      tools.push(runCodeTool(isolation, { ...DEFAULT_RUN_CODE_LIMITS, ...limits }));
      logger.info({ isolation: isolation.level, enforces: isolation.enforces, detail: isolation.detail }, "run_code sandbox");
    }
    logger.info({ search: backend.name, documents: local?.size, tools: tools.map((t) => t.name) }, "external tools ready");
    return new Toolbox(new Map(tools.map((t) => [t.name, t])), closers);
  }

  private static webBackend(search: ToolsConfig["search"]): SearchBackend {
    if (search.backend === "searxng") return new SearxngBackend({ url: search.searxng!.url, timeoutMs: search.timeoutMs, retries: search.retries });
    const brave = search.brave ?? { url: "https://api.search.brave.com", apiKeyEnv: "BRAVE_API_KEY" };
    const apiKey = process.env[brave.apiKeyEnv];
    if (!apiKey) throw new ToolConfigError(`tools.search.backend is "brave" but the environment variable ${brave.apiKeyEnv} (tools.search.brave.apiKeyEnv) holds no API key`);
    return new BraveBackend({ url: brave.url, apiKey, timeoutMs: search.timeoutMs, retries: search.retries });
  }

  /** The functions the local model reads for these tools. */
  modelFunctions(): Record<string, FunctionSpec> {
    return Object.fromEntries([...this.tools.values()].map((t) => [t.name, { description: t.description, parameters: t.modelParameters }]));
  }

  close(): void {
    for (const close of this.closers) close();
  }
}
