import { describe, expect, it } from "vitest";
import { join } from "node:path";
import {
  GgmlType,
  GgufFormatError,
  readGgufHeader,
  readGgufHeaderAsync,
  gguf,
  writeGguf,
} from "../../src/gguf/index.js";
import { demo } from "../helpers/engine.js";
import { patchedCopy, tempDir, truncatedCopy } from "../helpers/files.js";

const dir = tempDir();

const broken: [string, () => string, RegExp][] = [
  ["empty file", () => truncatedCopy(demo.model, dir, "empty.gguf", 0), /shorter than a GGUF header/],
  [
    "truncated in the metadata",
    () => truncatedCopy(demo.model, dir, "meta-cut.gguf", 0.001),
    /runs past the end|cannot fit/,
  ],
  [
    "wrong version",
    () => patchedCopy(demo.model, dir, "v9.gguf", (b) => b.writeUInt32LE(9, 4)),
    /unsupported GGUF version 9/,
  ],
  [
    "absurd tensor count",
    () => patchedCopy(demo.model, dir, "count.gguf", (b) => b.writeBigUInt64LE(1n << 40n, 8)),
    /tensor count .* cannot fit/,
  ],
  [
    "absurd metadata count",
    () => patchedCopy(demo.model, dir, "kv.gguf", (b) => b.writeBigUInt64LE(1n << 50n, 16)),
    /metadata count .* cannot fit/,
  ],
  [
    "huge string length",
    () => patchedCopy(demo.model, dir, "str.gguf", (b) => b.writeBigUInt64LE(1n << 40n, 24)),
    /claims \d+ bytes|runs past/,
  ],
];

describe("GGUF reader and writer", () => {
  it("round-trips metadata of every written type and tensor infos", () => {
    const path = join(dir, "rt.gguf");
    const data = new Float32Array([1, 2, 3, 4, 5, 6]);
    writeGguf(
      path,
      {
        "a.u32": gguf.u32(7),
        "a.f32": gguf.f32(0.5),
        "a.bool": gguf.bool(true),
        "a.str": gguf.str("héllo"),
        "a.strs": gguf.strings(["x", "y"]),
        "a.i32s": gguf.i32s([-1, 2]),
      },
      [{ name: "t", shape: [3, 2], type: GgmlType.F32, data: () => new Uint8Array(data.buffer) }],
    );
    const file = readGgufHeader(path);
    expect(file.version).toBe(3);
    expect(file.metadata.get("a.u32")).toBe(7);
    expect(file.metadata.get("a.f32")).toBe(0.5);
    expect(file.metadata.get("a.bool")).toBe(true);
    expect(file.metadata.get("a.str")).toBe("héllo");
    expect(file.metadata.get("a.strs")).toMatchObject({ items: ["x", "y"] });
    expect(file.metadata.get("a.i32s")).toMatchObject({ items: [-1, 2] });
    expect(file.tensors).toEqual([{ name: "t", shape: [3, 2], type: GgmlType.F32, offset: 0n }]);
    expect(file.dataOffset % 32).toBe(0);
  });

  for (const [name, make, reason] of broken) {
    it(`refuses a file with ${name}`, () => {
      const path = make();
      expect(() => readGgufHeader(path)).toThrow(GgufFormatError);
      expect(() => readGgufHeader(path)).toThrow(reason);
    });
  }
});

describe("the server's asynchronous GGUF reader", () => {
  it("reads what the synchronous reader reads, also a header larger than its first read-ahead, and refuses the same files", async () => {
    const big = join(dir, "big-header.gguf");
    writeGguf(big, { "a.long": gguf.str("x".repeat(6 << 20)), "a.u32": gguf.u32(7) }, [
      { name: "t", shape: [2], type: GgmlType.F32, data: () => new Uint8Array(8) },
    ]);
    for (const path of [demo.model, big]) {
      const { path: _p, ...sync } = readGgufHeader(path);
      const { path: _q, ...read } = await readGgufHeaderAsync(path);
      expect(read).toEqual(sync);
    }
    for (const [, make, reason] of broken) await expect(readGgufHeaderAsync(make())).rejects.toThrow(reason);
  });
});
