import { basename, isAbsolute } from "node:path";
import type { ServerContext } from "../context.js";

/**
 * A server path as a caller sees it: in full for an admin (who manages the files), else only the file's name (where
 * the server keeps its files is none of a token holder's business). A remote engine's model name stays as it is.
 */
export const shownPath = (path: string, admin: boolean) => (admin || !isAbsolute(path) ? path : basename(path));

/** Absolute paths in a message (an adapter's load error), each cut to its file's name; URLs stay whole. */
const ABSOLUTE_PATH = /(?<![\w.~:/-])\/(?:[^\s"'`:,;()<>[\]{}/]+\/)*([^\s"'`:,;()<>[\]{}/]+)/g;

/**
 * The library as list_adapters and the weact://adapters resource show it: each entry, resident or with its error;
 * server paths only to an admin.
 */
export const adapterListing = (ctx: ServerContext, admin: boolean) =>
  ctx.runtime.library.list().map(({ entry, info, error }) => ({
    alias: entry.alias,
    description: entry.description,
    file: shownPath(info?.filePath ?? entry.filePath, admin),
    scale: entry.scale,
    rank: info?.rank ?? null,
    sha256: info?.sha256 ?? null,
    size_bytes: info?.sizeBytes ?? null,
    resident: Boolean(info),
    // an activated LoRA: the text whose last occurrence in the prompt starts it
    ...(info?.invocationTokens ? { invocation: ctx.runtime.engine.detokenize(info.invocationTokens) } : {}),
    ...(error ? { error: admin ? error : error.replace(ABSOLUTE_PATH, "$1") } : {}),
  }));
