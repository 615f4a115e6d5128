import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";

/** sha256 of a file's bytes, streamed so multi-GB models do not sit in memory. */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 4 << 20 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}
