import { closeSync, openSync, readSync } from "node:fs";
import { ggmlTensorBytes, type GgufTensorInfo, type GgufFile } from "../../gguf/index.js";

/** The raw bytes of one tensor of a GGUF file read by readGgufHeader (ggml order, ne[0] fastest; quantized types as their blocks). */
export function readGgufTensorData(file: GgufFile, tensor: string | GgufTensorInfo): Buffer {
  const info = typeof tensor === "string" ? file.tensors.find((t) => t.name === tensor) : tensor;
  if (!info) throw new Error(`${file.path}: no tensor ${String(tensor)}`);
  const bytes = ggmlTensorBytes(info.shape, info.type);
  if (bytes === undefined) throw new Error(`${file.path}: tensor ${info.name} has ggml type ${info.type}, whose size this project does not know`);
  const buf = Buffer.alloc(bytes);
  const fd = openSync(file.path, "r");
  try {
    let done = 0;
    const start = file.dataOffset + Number(info.offset);
    while (done < buf.length) {
      const n = readSync(fd, buf, done, buf.length - done, start + done);
      if (n === 0) throw new Error(`${file.path}: tensor ${info.name} runs past the end of the file`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return buf;
}
