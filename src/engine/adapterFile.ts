import { resolve } from "node:path";
import { GgufFormatError, loraProblems, readGgufHeaderAsync, sha256File, type GgufFile } from "../gguf/index.js";
import { AdapterVersion } from "./AdapterVersion.js";
import { AdapterFileError, AdapterIncompatibleError } from "./errors.js";
import type { AdapterInfo, AdapterSpec } from "./types.js";

/**
 * An adapter file checked against the base model (llama.cpp's own rules, before any engine sees it) and named as
 * the version it is: its content hash at the spec's scale (and the hash of the PEFT folder an engine loads
 * instead, `peftSha256`). Every backend makes its versions through this.
 */
export async function readAdapterFile(
  spec: AdapterSpec,
  base: GgufFile,
  peftSha256?: string,
): Promise<{ info: AdapterInfo; header: GgufFile }> {
  const filePath = resolve(spec.filePath);
  let header: GgufFile;
  try {
    header = await readGgufHeaderAsync(filePath);
  } catch (err) {
    if (err instanceof GgufFormatError) throw new AdapterFileError(filePath, err.reason);
    throw err;
  }
  const check = loraProblems(header, base);
  if (check.incompatible) throw new AdapterIncompatibleError(filePath, check.problems);
  if (check.problems.length || !check.shape) throw new AdapterFileError(filePath, check.problems.join("; "));
  const sha256 = await sha256File(filePath);
  const version = AdapterVersion.of(spec.alias, sha256, spec.scale, peftSha256);
  const info: AdapterInfo = {
    version,
    id: version.toString(),
    alias: spec.alias,
    filePath,
    scale: spec.scale,
    sha256,
    ...(peftSha256 ? { peftSha256 } : {}),
    rank: check.shape.rank,
    alpha: check.shape.alpha,
    targetTensors: check.shape.targets,
    sizeBytes: header.fileSize,
    ...(check.shape.invocationTokens ? { invocationTokens: check.shape.invocationTokens } : {}),
  };
  return { info, header };
}
