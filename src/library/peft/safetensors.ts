import { closeSync, fstatSync, openSync, readSync, writeFileSync } from "node:fs";
import { PeftImportError } from "./errors.js";

/**
 * A small safetensors reader and writer. The format: an 8-byte little-endian header length N, N bytes of
 * JSON `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"?: {string: string}}`, then the
 * byte buffer; offsets are relative to the buffer's start, shapes are row-major (torch order).
 */

/** Element sizes of every dtype the format defines (so sizes can be checked even for ones we refuse). */
export const SAFETENSORS_DTYPE_SIZE: Readonly<Record<string, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  I64: 8,
  U64: 8,
  F64: 8,
};

export interface SafetensorsTensor {
  readonly name: string;
  readonly dtype: string;
  /** Row-major (torch) order. */
  readonly shape: readonly number[];
  /** Byte range relative to the start of the data buffer. */
  readonly begin: number;
  readonly end: number;
}

export interface SafetensorsHeader {
  readonly path: string;
  readonly fileSize: number;
  /** Absolute file offset of the data buffer (8 + header length). */
  readonly dataStart: number;
  readonly tensors: readonly SafetensorsTensor[];
  readonly metadata: Readonly<Record<string, string>>;
}

// A real header is kilobytes to a few MB; the bound keeps a corrupted length from allocating gigabytes.
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

function parseHeader(path: string, fileSize: number, json: Buffer): SafetensorsHeader {
  const fail = (field: string | undefined, reason: string): never => {
    throw new PeftImportError(path, field, reason);
  };
  let raw: unknown;
  try {
    raw = JSON.parse(json.toString("utf8"));
  } catch (err) {
    return fail("header", `the JSON header does not parse: ${(err as Error).message}`);
  }
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) return fail("header", "the JSON header is not an object");
  const dataStart = 8 + json.length;
  const bufferSize = fileSize - dataStart;
  const tensors: SafetensorsTensor[] = [];
  let metadata: Record<string, string> = {};
  for (const [name, entry] of Object.entries(raw as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (
        !entry ||
        typeof entry !== "object" ||
        Array.isArray(entry) ||
        Object.values(entry).some((v) => typeof v !== "string")
      ) {
        fail("__metadata__", "must map strings to strings");
      }
      metadata = entry as Record<string, string>;
      continue;
    }
    if (!entry || typeof entry !== "object") return fail(name, "the header entry is not an object");
    const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
    if (typeof dtype !== "string") return fail(name, "dtype is missing");
    const size = SAFETENSORS_DTYPE_SIZE[dtype];
    if (size === undefined) return fail(name, `unknown dtype "${dtype}"`);
    if (!Array.isArray(shape) || !shape.every(isCount))
      return fail(name, "shape must be a list of non-negative integers");
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isCount))
      return fail(name, "data_offsets must be [begin, end]");
    const [begin, end] = offsets as [number, number];
    if (end < begin) fail(name, `data_offsets [${begin}, ${end}] end before they begin`);
    const expected = (shape as number[]).reduce((a, b) => a * b, 1) * size;
    if (end - begin !== expected)
      fail(name, `data_offsets [${begin}, ${end}] hold ${end - begin} bytes but ${dtype} [${shape}] needs ${expected}`);
    if (end > bufferSize) {
      fail(
        name,
        `data (bytes ${begin} to ${end} of the buffer) lies past the end of the file: the buffer has ${Math.max(bufferSize, 0)} bytes (truncated file?)`,
      );
    }
    tensors.push({ name, dtype, shape: shape as number[], begin, end });
  }
  return { path, fileSize, dataStart, tensors, metadata };
}

function readFully(fd: number, buf: Buffer, position: number): number {
  let done = 0;
  while (done < buf.length) {
    const n = readSync(fd, buf, done, buf.length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

/** An open safetensors file: the checked header, and tensor bytes read on demand (large files never sit in memory). */
export class SafetensorsFile {
  private constructor(
    private fd: number | undefined,
    readonly header: SafetensorsHeader,
  ) {}

  static open(path: string): SafetensorsFile {
    let fd: number;
    try {
      fd = openSync(path, "r");
    } catch (err) {
      throw new PeftImportError(path, undefined, `cannot open: ${(err as Error).message}`);
    }
    try {
      const fileSize = fstatSync(fd).size;
      const fail = (reason: string): never => {
        throw new PeftImportError(path, "header", reason);
      };
      if (fileSize < 8) fail(`the file is ${fileSize} bytes, shorter than the 8-byte header length (truncated file?)`);
      const lenBuf = Buffer.alloc(8);
      readFully(fd, lenBuf, 0);
      const len = lenBuf.readBigUInt64LE(0);
      if (len > BigInt(MAX_HEADER_BYTES))
        fail(`the header claims ${len} bytes (more than ${MAX_HEADER_BYTES}): not a safetensors file`);
      if (len > BigInt(fileSize - 8))
        fail(`the header claims ${len} bytes but only ${fileSize - 8} follow the length (truncated file?)`);
      const json = Buffer.alloc(Number(len));
      readFully(fd, json, 8);
      return new SafetensorsFile(fd, parseHeader(path, fileSize, json));
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  tensor(name: string): SafetensorsTensor | undefined {
    return this.header.tensors.find((t) => t.name === name);
  }

  /** The tensor's raw bytes (little-endian, row-major). */
  read(tensor: SafetensorsTensor): Buffer {
    if (this.fd === undefined) throw new Error(`${this.header.path} is closed`);
    const buf = Buffer.alloc(tensor.end - tensor.begin);
    const n = readFully(this.fd, buf, this.header.dataStart + tensor.begin);
    if (n !== buf.length)
      throw new PeftImportError(
        this.header.path,
        tensor.name,
        `the file ended after ${n} of ${buf.length} bytes (changed while reading?)`,
      );
    return buf;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

export interface SafetensorsTensorSource {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** Writes a safetensors file the way the reference library does (safetensorsBytes). */
export function writeSafetensors(
  path: string,
  tensors: readonly SafetensorsTensorSource[],
  metadata: Record<string, string> = { format: "pt" },
): void {
  writeFileSync(path, safetensorsBytes(tensors, metadata));
}

/**
 * A safetensors file's bytes the way the reference library writes them: buffer in the given order, header padded with
 * spaces to 8 bytes.
 */
export function safetensorsBytes(
  tensors: readonly SafetensorsTensorSource[],
  metadata: Record<string, string> = { format: "pt" },
): Buffer {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = Buffer.from(JSON.stringify(header), "utf8");
  const padded = Math.ceil(json.length / 8) * 8;
  json = Buffer.concat([json, Buffer.alloc(padded - json.length, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([
    len,
    json,
    ...tensors.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
  ]);
}
