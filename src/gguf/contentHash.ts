import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import type { FileHandle } from "node:fs/promises";

const CHUNK = 4 << 20;

/** sha256 of a file's bytes, streamed so multi-GB models do not sit in memory. */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: CHUNK })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/**
 * sha256 of the first `size` bytes of an open file, read through its descriptor (never its name again: a name can be
 * pointed elsewhere between a check and a read). A file cut shorter meanwhile hashes what it still has.
 */
export async function sha256Of(handle: FileHandle, size: number): Promise<string> {
  const hash = createHash("sha256");
  const buffer = Buffer.allocUnsafe(Math.max(1, Math.min(CHUNK, size)));
  for (let pos = 0; pos < size;) {
    const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, size - pos), pos);
    if (bytesRead === 0) break;
    hash.update(buffer.subarray(0, bytesRead));
    pos += bytesRead;
  }
  return hash.digest("hex");
}
