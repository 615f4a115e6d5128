import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { z } from "zod";
import { describeIssues } from "../library/manifest.js";
import { DEFAULT_MANIFEST } from "../paths.js";

const GpuSchema = z.union([z.enum(["auto", "cuda", "vulkan", "metal"]), z.literal(false)]);

export const ConfigSchema = z
  .object({
    model: z
      .object({
        /** GGUF base model; unset = the generated demo model. */
        path: z.string().min(1).optional(),
        gpu: GpuSchema.default("auto"),
        gpuLayers: z.union([z.number().int().nonnegative(), z.enum(["auto", "max"])]).default("auto"),
        threads: z.number().int().positive().optional(),
        contextSize: z.number().int().min(256).max(1 << 20).default(8192),
        sequencesPerContext: z.number().int().min(1).max(64).default(4),
        maxContexts: z.number().int().min(1).max(64).default(2),
        batchSize: z.number().int().min(1).max(8192).default(512),
      })
      .strict()
      .prefault({}),
    adapters: z
      .object({
        /** The adapter manifest (JSON). */
        manifest: z.string().min(1).optional(),
      })
      .strict()
      .prefault({}),
    sessions: z
      .object({
        /** External tool results kept verbatim in what the model reads; older ones become a marker (paper default 5). */
        keepToolResults: z.number().int().min(0).max(1000).default(5),
        idleMinutes: z.number().positive().max(7 * 24 * 60).default(30),
        maxSessions: z.number().int().positive().max(10_000).default(64),
        maxSessionsPerClient: z.number().int().positive().max(10_000).default(16),
        /** Longest handoff the model may write in offload_lora (the grammar enforces it). */
        handoffMaxChars: z.number().int().min(16).max(100_000).default(1000),
        /** Model calls waiting on the engine before new ones are refused as busy. */
        maxQueuedGenerations: z.number().int().positive().max(10_000).default(32),
        defaultMaxTokens: z.number().int().positive().max(1 << 20).default(512),
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
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type Config = z.infer<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;

export class ConfigError extends Error {
  constructor(readonly source: string, readonly issues: readonly string[]) {
    super(`configuration ${source} is invalid: ${issues.join("; ")}`);
    this.name = "ConfigError";
  }
}

export interface ResolvedConfig extends Config {
  /** Absolute path of the manifest in use. */
  manifestPath: string;
  /** True when no model was configured and the generated demo model is served. */
  demo: boolean;
}

/** Validates a config object; relative paths resolve against `baseDir` (the config file's folder). */
export function resolveConfig(input: unknown, source: string, baseDir: string): ResolvedConfig {
  const parsed = ConfigSchema.safeParse(input ?? {});
  if (!parsed.success) throw new ConfigError(source, describeIssues(parsed.error));
  const config = parsed.data;
  if (config.model.path) config.model.path = resolve(baseDir, config.model.path);
  if (config.server.tokenFile) config.server.tokenFile = resolve(baseDir, config.server.tokenFile);
  return {
    ...config,
    manifestPath: config.adapters.manifest ? resolve(baseDir, config.adapters.manifest) : DEFAULT_MANIFEST,
    demo: !config.model.path,
  };
}

export function loadConfigFile(file: string): ResolvedConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new ConfigError(file, [`cannot read it as JSON: ${(err as Error).message}`]);
  }
  return resolveConfig(raw, file, dirname(resolve(file)));
}
