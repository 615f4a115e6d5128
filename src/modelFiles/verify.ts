import { readFileSync, statSync } from "node:fs";
import writeFileAtomic from "write-file-atomic";
import { z } from "zod";
import { GgufFormatError, metaString, readGgufHeader, sha256File } from "../gguf/index.js";
import type { ModelSpec } from "./types.js";

/**
 * The marker written beside a file once it verified: its hash, and the size and mtime it had then. While both are
 * unchanged the file is taken as verified without reading its bytes again (hashing 250 MB takes seconds).
 */
const MarkerSchema = z.object({ sha256: z.string(), size: z.number(), mtimeMs: z.number() });

export const markerPath = (file: string) => `${file}.verified.json`;

const statOf = (file: string) => {
  try {
    return statSync(file);
  } catch {
    return undefined;
  }
};

/** True when `file` verified earlier and has not changed since (its marker matches the spec and the file). */
export function isVerified(file: string, spec: ModelSpec): boolean {
  const stats = statOf(file);
  if (!stats?.isFile()) return false;
  let marker: z.infer<typeof MarkerSchema>;
  try {
    marker = MarkerSchema.parse(JSON.parse(readFileSync(markerPath(file), "utf8")));
  } catch {
    return false; // no marker, or one this code did not write: verify the bytes instead
  }
  return marker.sha256 === spec.sha256 && marker.size === stats.size && marker.mtimeMs === stats.mtimeMs;
}

/** Records that `file` verified, as it is now. */
export function markVerified(file: string, spec: ModelSpec): void {
  const { size, mtimeMs } = statSync(file);
  writeFileAtomic.sync(markerPath(file), `${JSON.stringify({ sha256: spec.sha256, size, mtimeMs })}\n`);
}

/**
 * Why `file` is not the model `spec` pins (its size, its SHA-256, its GGUF architecture), or undefined when it is.
 * `sha256` is the hash when the caller computed it while writing the file, so the bytes are not read twice.
 */
export async function verifyProblem(file: string, spec: ModelSpec, sha256?: string): Promise<string | undefined> {
  const stats = statOf(file);
  if (!stats?.isFile()) return "not a regular file";
  if (stats.size !== spec.size) return `${stats.size} bytes, expected ${spec.size}`;
  const actual = sha256 ?? (await sha256File(file));
  if (actual !== spec.sha256) return `SHA-256 ${actual}, expected ${spec.sha256}`;
  try {
    const architecture = metaString(readGgufHeader(file), "general.architecture");
    if (architecture !== spec.architecture)
      return `GGUF architecture ${architecture ?? "(none)"}, expected ${spec.architecture}`;
  } catch (err) {
    if (err instanceof GgufFormatError) return err.reason;
    throw err;
  }
  return undefined;
}
