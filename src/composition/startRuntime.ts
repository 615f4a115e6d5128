import { LocalEngine } from "../engines/local/index.js";
import { LlamaChatCodec } from "../llamaCpp/LlamaChatCodec.js";
import { RemoteEngine } from "../engines/remote/index.js";
import type { Engine } from "../engine/index.js";
import { adapterDirs, type ResolvedConfig } from "../config/loadConfig.js";
import { ensureDemoWeights } from "../demo/ensure.js";
import { AdapterLibrary } from "../library/AdapterLibrary.js";
import { loadManifest } from "../library/manifest.js";
import type { Logger } from "../log.js";
import type { Runtime } from "../mcp/context.js";

/**
 * The base model the config names (the demo weights when it names none), served without adapters: by llama.cpp in
 * this process, or by the remote engine of engine.remote with this GGUF's tokenizer and chat template.
 */
export async function loadEngine(config: ResolvedConfig, logger: Logger): Promise<Engine> {
  const modelPath = config.model.path ?? ensureDemoWeights(logger).model;
  // the composition root: the one place that picks the engine backend; everything else sees `Engine`
  const remote = config.engine.backend === "remote" ? config.engine.remote! : undefined;
  if (remote) {
    return RemoteEngine.connect({
      url: remote.url,
      flavor: remote.flavor,
      model: remote.model,
      adapterDir: remote.adapterDir,
      localAdapterDir: remote.localAdapterDir,
      adapterSha256: remote.adapterSha256,
      apiKey: remote.apiKeyEnv ? process.env[remote.apiKeyEnv] : undefined,
      timeoutMs: remote.timeoutMs,
      maxInFlight: remote.maxInFlight,
      maxResponseBytes: remote.maxResponseBytes,
      sessions: remote.sessions,
      contextSize: config.model.contextSize,
      maxLogprobs: remote.maxLogprobs,
      // rendering and tokenizing happen here, with the GGUF's own template: the remote engine gets token ids
      codec: await LlamaChatCodec.load({ modelPath, logger, chatTemplate: config.model.chatTemplate }),
      logger,
    });
  }
  return LocalEngine.load({
    modelPath,
    gpu: config.model.gpu,
    gpuLayers: config.model.gpuLayers,
    threads: config.model.threads,
    binding: config.model.binding,
    contextSize: config.model.contextSize,
    sequencesPerContext: config.model.sequencesPerContext,
    maxContexts: config.model.maxContexts,
    batchSize: config.model.batchSize,
    swaFullCache: config.model.swaFullCache,
    batchInvariant: config.model.batchInvariant,
    chatTemplate: config.model.chatTemplate,
    cache: {
      strategy: config.cache.strategy,
      spillDir: config.cache.spillDir,
      spillBytes: Math.round(config.cache.spillMiB * 1024 * 1024),
      sharedPrefixes: config.cache.sharedPrefixes,
      background: config.cache.background,
      backgroundDecodeMs: config.cache.backgroundDecodeMs,
    },
    logger,
  });
}

/** Loads the base model and the adapter library named by the config (the demo weights when none is named). */
export async function startRuntime(config: ResolvedConfig, logger: Logger): Promise<Runtime> {
  // the manifest is read first: a malformed one fails before the model loads
  const entries = loadManifest(config.manifestPath);
  const engine = await loadEngine(config, logger);
  try {
    const library = await AdapterLibrary.load(engine, entries, logger, {
      manifestPath: config.manifestPath,
      allowedDirs: adapterDirs(config),
    });
    return { config, engine, library, logger };
  } catch (err) {
    await engine.dispose();
    throw err;
  }
}
