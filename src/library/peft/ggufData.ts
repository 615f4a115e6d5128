import { closeSync, openSync, readSync } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { ggmlTensorBytes, type GgufTensorInfo, type GgufFile } from "../../gguf/index.js";

/** Where one tensor's bytes are in its GGUF file, and a buffer of their size. */
function tensorRange(
  file: GgufFile,
  tensor: string | GgufTensorInfo,
): { info: GgufTensorInfo; start: number; buf: Buffer } {
  const info = typeof tensor === "string" ? file.tensors.find((t) => t.name === tensor) : tensor;
  if (!info) throw new Error(`${file.path}: no tensor ${String(tensor)}`);
  const bytes = ggmlTensorBytes(info.shape, info.type);
  if (bytes === undefined)
    throw new Error(
      `${file.path}: tensor ${info.name} has ggml type ${info.type}, whose size this project does not know`,
    );
  return { info, start: file.dataOffset + Number(info.offset), buf: Buffer.alloc(bytes) };
}

const pastTheEnd = (file: GgufFile, info: GgufTensorInfo) =>
  new Error(`${file.path}: tensor ${info.name} runs past the end of the file`);

/**
 * The raw bytes of one tensor of a GGUF file read by readGgufHeader (ggml order, ne[0] fastest; quantized types as
 * their blocks).
 */
export function readGgufTensorData(file: GgufFile, tensor: string | GgufTensorInfo): Buffer {
  const { info, start, buf } = tensorRange(file, tensor);
  const fd = openSync(file.path, "r");
  try {
    let done = 0;
    while (done < buf.length) {
      const n = readSync(fd, buf, done, buf.length - done, start + done);
      if (n === 0) throw pastTheEnd(file, info);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return buf;
}

/** As readGgufTensorData, off the event loop, from a handle of the file the caller keeps open. */
export async function readGgufTensorDataFrom(
  handle: FileHandle,
  file: GgufFile,
  tensor: string | GgufTensorInfo,
): Promise<Buffer> {
  const { info, start, buf } = tensorRange(file, tensor);
  let done = 0;
  while (done < buf.length) {
    const { bytesRead } = await handle.read(buf, done, buf.length - done, start + done);
    if (bytesRead === 0) throw pastTheEnd(file, info);
    done += bytesRead;
  }
  return buf;
}
