import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LlamaModel } from "../llama/nodeLlamaCpp.js";
import type { GgufFile } from "../../../gguf/index.js";
import { freeResidentLora, loadResidentLora, type AdapterWeight } from "../llama/internals.js";
import type { LlamaLogTail } from "../llama/runtime.js";
import {
  AdapterFileError,
  readAdapterFile,
  UnknownAdapterError,
  type AdapterInfo,
  type AdapterSpec,
  type AdapterVersion,
} from "../../../engine/index.js";

let copies = 0;

interface Version {
  info: AdapterInfo;
  /** Where llama.cpp loaded it from: the file itself, or a private copy when another version holds that path. */
  loadPath: string;
  copied: boolean;
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
  ) {}

  /** Validates and loads a version (or returns it if those bytes at that scale are already resident). */
  async load(spec: AdapterSpec): Promise<AdapterInfo> {
    const { info } = await readAdapterFile(spec, this.base);
    const { id, filePath, sha256 } = info;
    const existing = this.versions.get(id);
    if (existing) return existing.info;

    // node-llama-cpp caches adapters by path: new bytes at a path another version holds need their own path
    const pathTaken = [...this.versions.values()].some((v) => v.loadPath === filePath);
    let loadPath = filePath;
    if (pathTaken) {
      const dir = join(tmpdir(), "weact-adapters");
      mkdirSync(dir, { recursive: true });
      loadPath = join(dir, `${process.pid}-${++copies}-${sha256}.gguf`); // unique per version: node-llama-cpp caches by path
      copyFileSync(filePath, loadPath);
    }
    const mark = this.llamaErrors.mark();
    try {
      await loadResidentLora(this.model, loadPath);
    } catch (err) {
      if (pathTaken) rmSync(loadPath, { force: true });
      const detail = this.llamaErrors.since(mark);
      throw new AdapterFileError(
        filePath,
        `llama.cpp refused it: ${(err as Error).message}${detail ? ` (${detail})` : ""}`,
      );
    }
    this.versions.set(id, { info, loadPath, copied: pathTaken });
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
    if (v.copied) rmSync(v.loadPath, { force: true });
  }

  private entry(version: AdapterVersion): Version {
    const v = this.versions.get(version.toString());
    if (!v) throw new UnknownAdapterError(version.toString(), [...this.versions.keys()]);
    return v;
  }
}
