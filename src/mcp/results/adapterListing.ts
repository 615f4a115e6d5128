import type { ServerContext } from "../context.js";

/** The library as list_adapters and the weact://adapters resource show it: each entry, resident or with its error. */
export const adapterListing = (ctx: ServerContext) =>
  ctx.runtime.library.list().map(({ entry, info, error }) => ({
    alias: entry.alias,
    description: entry.description,
    file: info?.filePath ?? entry.filePath,
    scale: entry.scale,
    rank: info?.rank ?? null,
    sha256: info?.sha256 ?? null,
    size_bytes: info?.sizeBytes ?? null,
    resident: Boolean(info),
    // an activated LoRA: the text whose last occurrence in the prompt starts it
    ...(info?.invocationTokens ? { invocation: ctx.runtime.engine.detokenize(info.invocationTokens) } : {}),
    ...(error ? { error } : {}),
  }));
