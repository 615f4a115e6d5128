import type { LlamaModel } from "node-llama-cpp";
import { AdapterFileError, AdapterIncompatibleError, DuplicateAdapterError, UnknownAdapterError } from "../errors.js";
import { sha256File } from "../gguf/contentHash.js";
import { GgufFormatError, readGgufHeader, type GgufFile } from "../gguf/reader.js";
import { loraProblems } from "../gguf/validate.js";
import { loadResidentLora, type AdapterWeight } from "../llama/internals.js";
import type { LlamaLogTail } from "../llama/runtime.js";
import type { AdapterInfo, AdapterSpec } from "../engine/types.js";
import { resolve } from "node:path";

/**
 * The adapters loaded beside the base model. Each is validated against the base before llama.cpp sees it,
 * loaded once, and shared by every context; its identity is (alias, content hash, scale).
 */
export class ResidentAdapters {
  private readonly byAlias = new Map<string, AdapterInfo>();

  constructor(
    private readonly model: LlamaModel,
    private readonly base: GgufFile,
    private readonly llamaErrors: LlamaLogTail,
  ) {}

  async add(spec: AdapterSpec): Promise<AdapterInfo> {
    if (this.byAlias.has(spec.alias)) throw new DuplicateAdapterError(spec.alias);
    const filePath = resolve(spec.filePath);
    let header: GgufFile;
    try {
      header = readGgufHeader(filePath);
    } catch (err) {
      if (err instanceof GgufFormatError) throw new AdapterFileError(filePath, err.reason);
      throw err;
    }
    const check = loraProblems(header, this.base);
    if (check.incompatible) throw new AdapterIncompatibleError(filePath, check.problems);
    if (check.problems.length || !check.shape) throw new AdapterFileError(filePath, check.problems.join("; "));
    const sha256 = await sha256File(filePath);
    const mark = this.llamaErrors.mark();
    try {
      await loadResidentLora(this.model, filePath);
    } catch (err) {
      const detail = this.llamaErrors.since(mark);
      throw new AdapterFileError(filePath, `llama.cpp refused it: ${(err as Error).message}${detail ? ` (${detail})` : ""}`);
    }
    const info: AdapterInfo = {
      alias: spec.alias,
      filePath,
      scale: spec.scale,
      sha256,
      rank: check.shape.rank,
      alpha: check.shape.alpha,
      targetTensors: check.shape.targets,
      sizeBytes: header.fileSize,
    };
    this.byAlias.set(spec.alias, info);
    return info;
  }

  get(alias: string): AdapterInfo {
    const info = this.byAlias.get(alias);
    if (!info) throw new UnknownAdapterError(alias, [...this.byAlias.keys()]);
    return info;
  }

  list(): AdapterInfo[] {
    return [...this.byAlias.values()];
  }

  weight(alias: string): AdapterWeight {
    const { filePath, scale } = this.get(alias);
    return { filePath, scale };
  }
}
