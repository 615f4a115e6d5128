import { closeSync, openSync, readSync } from "node:fs";
import { GGML_TYPE_SIZE, type GgufTensorInfo, type GgufFile } from "../../gguf/index.js";

/** The raw bytes of one F32/F16/BF16 tensor of a GGUF file read by readGgufHeader (ggml order, ne[0] fastest). */
export function readGgufTensorData(file: GgufFile, tensor: string | GgufTensorInfo): Buffer {
  const info = typeof tensor === "string" ? file.tensors.find((t) => t.name === tensor) : tensor;
  if (!info) throw new Error(`${file.path}: no tensor ${String(tensor)}`);
  const size = GGML_TYPE_SIZE[info.type as keyof typeof GGML_TYPE_SIZE];
  if (size === undefined) throw new Error(`${file.path}: tensor ${info.name} has ggml type ${info.type}, not F32, F16 or BF16`);
  const buf = Buffer.alloc(info.shape.reduce((a, b) => a * b, 1) * size);
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
