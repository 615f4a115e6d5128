import { rm } from "node:fs/promises";
import type { LlamaModel } from "node-llama-cpp";
import type { GgufFile } from "../../../gguf/index.js";
import { freeResidentLora, loadResidentLora, type AdapterWeight } from "../decoding/internals.js";
import type { LlamaLogTail } from "../../../llamaCpp/startLlama.js";
import { linkForLoading, sweepStaleLinks } from "./loadLinks.js";
import {
  AdapterFileError,
  readAdapterFile,
  UnknownAdapterError,
  type AdapterInfo,
  type AdapterSpec,
  type AdapterVersion,
} from "../../../engine/index.js";

interface Version {
  info: AdapterInfo;
  /** The path node-llama-cpp knows it by: the file's own, or the link it was loaded through (gone since). */
  loadPath: string;
}

/**
 * Adapter versions loaded beside the base model. A version is one file's bytes at one scale: its id is
 * (alias, content hash, scale), so a refreshed alias is a new version and nothing keyed by the old id can
 * ever be served the new weights. Each is validated against the base before llama.cpp sees it, loaded
 * once, shared by every context, and freed only when nothing uses it.
 */
export class ResidentAdapters {
  private readonly versions = new Map<string, Version>();

  constructor(
    private readonly model: LlamaModel,
    private readonly base: GgufFile,
    private readonly llamaErrors: LlamaLogTail,
  ) {
    sweepStaleLinks();
  }

  /** Validates and loads a version (or returns it if those bytes at that scale are already resident). */
  async load(spec: AdapterSpec): Promise<AdapterInfo> {
    const { info } = await readAdapterFile(spec, this.base);
    const { id, filePath, sha256 } = info;
    const existing = this.versions.get(id);
    if (existing) return existing.info;

    const pathTaken = [...this.versions.values()].some((v) => v.loadPath === filePath);
    let loadPath = filePath;
    if (pathTaken) {
      // new bytes at a path another version holds: node-llama-cpp caches adapters by path (loadLinks.ts)
      const link = await linkForLoading(filePath, sha256);
      if ("refused" in link) throw new AdapterFileError(filePath, link.refused);
      loadPath = link.path;
    }
    const mark = this.llamaErrors.mark();
    try {
      await loadResidentLora(this.model, loadPath);
    } catch (err) {
      const detail = this.llamaErrors.since(mark);
      throw new AdapterFileError(
        filePath,
        `llama.cpp refused it: ${(err as Error).message}${detail ? ` (${detail})` : ""}`,
      );
    } finally {
      if (pathTaken) await rm(loadPath, { force: true });
    }
    this.versions.set(id, { info, loadPath });
    return info;
  }

  get(version: AdapterVersion): AdapterInfo {
    return this.entry(version).info;
  }

  /** The resident version a version id names ("alias@sha256xscale"), if any. */
  find(id: string): AdapterVersion | undefined {
    return this.versions.get(id)?.info.version;
  }

  list(): AdapterInfo[] {
    return [...this.versions.values()].map((v) => v.info);
  }

  weight(version: AdapterVersion): AdapterWeight {
    const v = this.entry(version);
    return { filePath: v.loadPath, scale: v.info.scale };
  }

  /** Frees a version's memory. The caller has detached it from every context first. */
  async free(version: AdapterVersion): Promise<void> {
    const v = this.versions.get(version.toString());
    if (!v) return;
    this.versions.delete(version.toString());
    await freeResidentLora(this.model, v.loadPath);
  }

  private entry(version: AdapterVersion): Version {
    const v = this.versions.get(version.toString());
    if (!v) throw new UnknownAdapterError(version.toString(), [...this.versions.keys()]);
    return v;
  }
}
