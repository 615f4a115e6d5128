import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import {
  ggmlTensorBytes,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GgufValueType,
  type GgufScalar,
  type GgufTensorInfo,
  type GgufValue,
} from "./format.js";

/** The file is not a well-formed GGUF; `reason` says where it breaks. */
export class GgufFormatError extends Error {
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`${file}: not a valid GGUF file: ${reason}`);
    this.name = "GgufFormatError";
  }
}

export interface GgufFile {
  readonly path: string;
  readonly version: number;
  readonly fileSize: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;
  readonly tensors: readonly GgufTensorInfo[];
  /** Absolute file offset of the tensor data section. */
  readonly dataOffset: number;
}

// Bounds that no sane file exceeds; they keep a corrupted count from allocating gigabytes.
const MAX_STRING_BYTES = 64 * 1024 * 1024;
const MAX_DIMS = 4;

/** A file's bytes by position: at least `min` and at most `max` bytes from `pos`. */
type ByteSource = (pos: number, min: number, max: number) => Buffer;

/** The async reader's read-ahead did not reach `upTo`: read that far, then parse again. */
class NeedMoreBytes {
  constructor(readonly upTo: number) {}
}

/** Reads through a byte source in chunks, refusing to read past the end. */
class BoundedReader {
  private buf: Buffer = Buffer.alloc(0);
  private bufStart = 0;
  pos = 0;
  constructor(
    private readonly source: ByteSource,
    readonly size: number,
    private readonly fail: (reason: string) => never,
  ) {}

  private ensure(n: number, what: string) {
    if (n < 0 || this.pos + n > this.size)
      this.fail(`${what} at byte ${this.pos} runs past the end of the file (${this.size} bytes)`);
    if (this.pos >= this.bufStart && this.pos + n <= this.bufStart + this.buf.length) return;
    this.buf = this.source(this.pos, n, Math.min(Math.max(n, 1 << 20), this.size - this.pos));
    this.bufStart = this.pos;
  }
  bytes(n: number, what: string): Buffer {
    this.ensure(n, what);
    const off = this.pos - this.bufStart;
    this.pos += n;
    return this.buf.subarray(off, off + n);
  }
  u8(what: string) {
    return this.bytes(1, what).readUInt8(0);
  }
  u32(what: string) {
    return this.bytes(4, what).readUInt32LE(0);
  }
  u64(what: string): bigint {
    return this.bytes(8, what).readBigUInt64LE(0);
  }
  count(what: string, perItemMin: number): number {
    const n = this.u64(what);
    if (n * BigInt(Math.max(perItemMin, 1)) > BigInt(this.size - this.pos))
      this.fail(`${what} (${n}) cannot fit in the rest of the file`);
    return Number(n);
  }
  str(what: string): string {
    const n = this.u64(`${what} length`);
    if (n > BigInt(MAX_STRING_BYTES)) this.fail(`${what} claims ${n} bytes`);
    return this.bytes(Number(n), what).toString("utf8");
  }
}

const SCALAR_SIZE: Partial<Record<GgufValueType, number>> = {
  [GgufValueType.UINT8]: 1,
  [GgufValueType.INT8]: 1,
  [GgufValueType.BOOL]: 1,
  [GgufValueType.UINT16]: 2,
  [GgufValueType.INT16]: 2,
  [GgufValueType.UINT32]: 4,
  [GgufValueType.INT32]: 4,
  [GgufValueType.FLOAT32]: 4,
  [GgufValueType.UINT64]: 8,
  [GgufValueType.INT64]: 8,
  [GgufValueType.FLOAT64]: 8,
  [GgufValueType.STRING]: 8,
};

function readScalar(r: BoundedReader, type: GgufValueType, what: string, fail: (reason: string) => never): GgufScalar {
  switch (type) {
    case GgufValueType.UINT8:
      return r.u8(what);
    case GgufValueType.INT8:
      return r.bytes(1, what).readInt8(0);
    case GgufValueType.UINT16:
      return r.bytes(2, what).readUInt16LE(0);
    case GgufValueType.INT16:
      return r.bytes(2, what).readInt16LE(0);
    case GgufValueType.UINT32:
      return r.u32(what);
    case GgufValueType.INT32:
      return r.bytes(4, what).readInt32LE(0);
    case GgufValueType.FLOAT32:
      return r.bytes(4, what).readFloatLE(0);
    case GgufValueType.BOOL:
      return r.u8(what) !== 0;
    case GgufValueType.STRING:
      return r.str(what);
    case GgufValueType.UINT64:
      return r.u64(what);
    case GgufValueType.INT64:
      return r.bytes(8, what).readBigInt64LE(0);
    case GgufValueType.FLOAT64:
      return r.bytes(8, what).readDoubleLE(0);
    default:
      return fail(`${what} has unknown value type ${type}`);
  }
}

/** What a non-regular file is, for an error message. */
export function fileKind(stats: Stats): string {
  if (stats.isFIFO()) return "a FIFO";
  if (stats.isDirectory()) return "a directory";
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return "a device";
  if (stats.isSocket()) return "a socket";
  return "not a regular file";
}

// O_NONBLOCK: opening a FIFO must not wait for a writer (a blocked open would freeze the event loop or a thread)
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

/** Checked on the opened file itself (symlinks resolved), so nothing can be swapped in between a check and the open. */
function assertRegular(path: string, stats: Stats): void {
  if (!stats.isFile())
    throw new GgufFormatError(
      path,
      `not a regular file (${fileKind(stats)}); model and adapter files must be regular GGUF files`,
    );
}

/**
 * Parses a GGUF header (metadata and tensor infos, not the tensor data) with every count, length and
 * offset checked against the file size, so a corrupted file is reported here instead of inside llama.cpp.
 * Synchronous: for tools and tests; the server reads with `readGgufHeaderAsync`.
 */
export function readGgufHeader(path: string): GgufFile {
  let fd: number;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (err) {
    throw new GgufFormatError(path, `cannot open: ${(err as Error).message}`);
  }
  try {
    const stats = fstatSync(fd);
    assertRegular(path, stats);
    return parseHeader(path, stats.size, (pos, _min, max) => {
      const buf = Buffer.alloc(max);
      readSync(fd, buf, 0, max, pos);
      return buf;
    });
  } finally {
    closeSync(fd);
  }
}

/** How long the server waits for a header before giving up on the file (a hung mount, say). */
const ASYNC_READ_TIMEOUT_MS = 30_000;

/**
 * `readGgufHeader` without blocking the event loop: the file is read ahead asynchronously (more when the parse
 * needs it) and parsed from memory; a read that takes longer than `timeoutMs` fails instead of hanging.
 */
export async function readGgufHeaderAsync(path: string, timeoutMs = ASYNC_READ_TIMEOUT_MS): Promise<GgufFile> {
  let handle: FileHandle;
  try {
    handle = await open(path, OPEN_FLAGS);
  } catch (err) {
    throw new GgufFormatError(path, `cannot open: ${(err as Error).message}`);
  }
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new GgufFormatError(path, `reading its header took over ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
  });
  const parse = async (): Promise<GgufFile> => {
    const stats = await handle.stat();
    assertRegular(path, stats);
    let ahead = Buffer.alloc(0);
    let want = Math.min(stats.size, 4 << 20);
    for (;;) {
      if (want > ahead.length) {
        const more = Buffer.alloc(want - ahead.length);
        const { bytesRead } = await handle.read(more, 0, more.length, ahead.length);
        ahead = Buffer.concat([ahead, more.subarray(0, bytesRead)]);
      }
      try {
        return parseHeader(path, stats.size, (pos, min, max) => {
          if (pos + min > ahead.length) throw new NeedMoreBytes(pos + min);
          return ahead.subarray(pos, Math.min(pos + max, ahead.length));
        });
      } catch (err) {
        if (!(err instanceof NeedMoreBytes) || ahead.length >= stats.size) throw err;
        want = Math.min(stats.size, Math.max(err.upTo, ahead.length * 2));
      }
    }
  };
  try {
    return await Promise.race([parse(), timeout]);
  } finally {
    clearTimeout(timer);
    void handle.close().catch(() => undefined);
  }
}

function parseHeader(path: string, size: number, source: ByteSource): GgufFile {
  const fail = (reason: string): never => {
    throw new GgufFormatError(path, reason);
  };
  const r = new BoundedReader(source, size, fail);
  if (size < 24) fail(`file is ${size} bytes, shorter than a GGUF header`);
  const magic = r.u32("magic");
  if (magic !== GGUF_MAGIC) fail(`wrong magic 0x${magic.toString(16)} (expected "GGUF")`);
  const version = r.u32("version");
  if (version !== 2 && version !== 3) fail(`unsupported GGUF version ${version} (2 or 3 expected)`);
  const tensorCount = r.count("tensor count", 24);
  const kvCount = r.count("metadata count", 13);

  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = r.str(`metadata key #${i}`);
    const type = r.u32(`type of ${key}`) as GgufValueType;
    if (type === GgufValueType.ARRAY) {
      const itemType = r.u32(`item type of ${key}`) as GgufValueType;
      if (itemType === GgufValueType.ARRAY) fail(`${key} is a nested array`);
      const itemSize = SCALAR_SIZE[itemType] ?? fail(`${key} has unknown item type ${itemType}`);
      const n = r.count(`length of ${key}`, itemSize);
      const items: GgufScalar[] = new Array(n);
      for (let j = 0; j < n; j++) items[j] = readScalar(r, itemType, `${key}[${j}]`, fail);
      metadata.set(key, { itemType, items });
    } else {
      metadata.set(key, readScalar(r, type, key, fail));
    }
  }

  const tensors: GgufTensorInfo[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = r.str(`tensor #${i} name`);
    const nDims = r.u32(`dimension count of ${name}`);
    if (nDims < 1 || nDims > MAX_DIMS) fail(`tensor ${name} has ${nDims} dimensions (1 to ${MAX_DIMS} allowed)`);
    const shape: number[] = [];
    for (let d = 0; d < nDims; d++) {
      const ne = r.u64(`dimension ${d} of ${name}`);
      if (ne === 0n || ne > BigInt(Number.MAX_SAFE_INTEGER)) fail(`tensor ${name} has dimension ${d} of size ${ne}`);
      shape.push(Number(ne));
    }
    const type = r.u32(`type of ${name}`);
    const offset = r.u64(`offset of ${name}`);
    tensors.push({ name, shape, type, offset });
  }

  const alignmentValue = metadata.get("general.alignment");
  const alignment = typeof alignmentValue === "number" ? alignmentValue : GGUF_DEFAULT_ALIGNMENT;
  if (alignment <= 0 || (alignment & (alignment - 1)) !== 0)
    fail(`general.alignment ${alignment} is not a power of two`);
  const dataOffset = Math.ceil(r.pos / alignment) * alignment;
  for (const t of tensors) {
    // Types whose block sizes are not tabulated get only their start offset checked.
    const bytes = ggmlTensorBytes(t.shape, t.type) ?? 0;
    if (BigInt(dataOffset) + t.offset + BigInt(bytes) > BigInt(size)) {
      fail(`tensor ${t.name} data (offset ${t.offset}, ${bytes} bytes) lies past the end of the file`);
    }
  }
  return { path, version, fileSize: size, metadata, tensors, dataOffset };
}

export function metaString(file: GgufFile, key: string): string | undefined {
  const v = file.metadata.get(key);
  return typeof v === "string" ? v : undefined;
}

export function metaNumber(file: GgufFile, key: string): number | undefined {
  const v = file.metadata.get(key);
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return Number(v);
  return undefined;
}
