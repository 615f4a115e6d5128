import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalEngine } from "../../src/engines/local/index.js";
import { AdapterFileError, AdapterIncompatibleError, ModelFileError } from "../../src/engine/index.js";
import { readGgufHeader, baseModelProblems, gguf, writeGguf, GgmlType } from "../../src/gguf/index.js";
import { DEMO_DIMS, qwen3LoraFile, qwen3ModelFile } from "../../src/demo/qwen3.js";
import { buildVocabulary } from "../../src/demo/vocabulary.js";
import { demo, demoEngine, quietLogger, TEST_THREADS } from "../helpers/engine.js";
import { patchedCopy, tempDir, truncatedCopy, writeModelVariant } from "../helpers/files.js";

const dir = tempDir("weact-malformed-");

/** Byte offset of a tensor's offset field in the header, to point it past the end of the file. */
function tensorOffsetField(file: string, name: string): number {
  const bytes = readFileSync(file);
  const at = bytes.indexOf(Buffer.from(name, "utf8"), 24);
  const nDims = bytes.readUInt32LE(at + name.length);
  return at + name.length + 4 + nDims * 8 + 4;
}

/** A model file built from the demo recipe with its tensors edited. */
function modelWithTensors(
  name: string,
  edit: (t: ReturnType<typeof qwen3ModelFile>["tensors"]) => ReturnType<typeof qwen3ModelFile>["tensors"],
): string {
  const m = qwen3ModelFile({ name, dims: DEMO_DIMS, vocab: buildVocabulary(), seed: 3, weightType: GgmlType.F32 });
  const path = `${dir}/${name}.gguf`;
  writeGguf(path, m.metadata, edit(m.tensors));
  return path;
}

const MODELS: [string, () => string][] = [
  ...[0.0005, 0.01, 0.05, 0.2, 0.5, 0.9, 0.999].map((f): [string, () => string] => [
    `truncated at ${f * 100}%`,
    () => truncatedCopy(demo.model, dir, `trunc-${f}.gguf`, f),
  ]),
  ["wrong magic", () => patchedCopy(demo.model, dir, "magic.gguf", (b) => b.write("GGML", 0))],
  ["version 1", () => patchedCopy(demo.model, dir, "v1.gguf", (b) => b.writeUInt32LE(1, 4))],
  ["version 99", () => patchedCopy(demo.model, dir, "v99.gguf", (b) => b.writeUInt32LE(99, 4))],
  ["absurd tensor count", () => patchedCopy(demo.model, dir, "tcount.gguf", (b) => b.writeBigUInt64LE(1n << 62n, 8))],
  [
    "absurd metadata count",
    () => patchedCopy(demo.model, dir, "kvcount.gguf", (b) => b.writeBigUInt64LE(1n << 62n, 16)),
  ],
  [
    "fewer metadata entries than present",
    () => patchedCopy(demo.model, dir, "kvfew.gguf", (b) => b.writeBigUInt64LE(3n, 16)),
  ],
  [
    "huge first key length",
    () => patchedCopy(demo.model, dir, "keylen.gguf", (b) => b.writeBigUInt64LE(1n << 50n, 24)),
  ],
  [
    "tensor data offset past the end",
    () =>
      patchedCopy(demo.model, dir, "offset.gguf", (b) =>
        b.writeBigUInt64LE(1n << 40n, tensorOffsetField(demo.model, "output.weight")),
      ),
  ],
  [
    "no feed_forward_length (aborts llama.cpp)",
    () => writeModelVariant(dir, "no-ff", (m) => delete m["qwen3.feed_forward_length"]),
  ],
  [
    "no head_count (aborts llama.cpp)",
    () => writeModelVariant(dir, "no-heads", (m) => delete m["qwen3.attention.head_count"]),
  ],
  ["head_count 0", () => writeModelVariant(dir, "zero-heads", (m) => (m["qwen3.attention.head_count"] = gguf.u32(0)))],
  [
    "head_count_kv not dividing head_count",
    () => writeModelVariant(dir, "kv-heads", (m) => (m["qwen3.attention.head_count_kv"] = gguf.u32(3))),
  ],
  ["block_count 0", () => writeModelVariant(dir, "no-blocks", (m) => (m["qwen3.block_count"] = gguf.u32(0)))],
  ["no architecture", () => writeModelVariant(dir, "no-arch", (m) => delete m["general.architecture"])],
  [
    "unknown architecture",
    () =>
      writeModelVariant(dir, "alien", (m) => {
        m["general.architecture"] = gguf.str("alien");
        for (const k of Object.keys(m))
          if (k.startsWith("qwen3.")) {
            m[k.replace("qwen3.", "alien.")] = m[k];
            delete m[k];
          }
      }),
  ],
  ["no tokenizer", () => writeModelVariant(dir, "no-tok", (m) => delete m["tokenizer.ggml.tokens"])],
  [
    "embedding width disagreeing with token_embd",
    () => writeModelVariant(dir, "wide", (m) => (m["qwen3.embedding_length"] = gguf.u32(256))),
  ],
  [
    "a missing attention tensor",
    () => modelWithTensors("no-attn-q", (t) => t.filter((x) => x.name !== "blk.1.attn_q.weight")),
  ],
  [
    "an attention tensor of the wrong shape",
    () =>
      modelWithTensors("bad-shape", (t) =>
        t.map((x) =>
          x.name === "blk.0.attn_k.weight" ? { ...x, shape: [128, 32], data: () => new Uint8Array(128 * 32 * 4) } : x,
        ),
      ),
  ],
  ["a LoRA adapter instead of a model", () => demo.adapters.plan!],
];

const ADAPTERS: [string, () => string, typeof AdapterFileError | typeof AdapterIncompatibleError][] = [
  ...[0.01, 0.3, 0.9].map((f): [string, () => string, typeof AdapterFileError] => [
    `truncated at ${f * 100}%`,
    () => truncatedCopy(demo.adapters.search!, dir, `lora-trunc-${f}.gguf`, f),
    AdapterFileError,
  ]),
  [
    "wrong magic",
    () => patchedCopy(demo.adapters.search!, dir, "lora-magic.gguf", (b) => b.write("XXXX", 0)),
    AdapterFileError,
  ],
  [
    "another architecture",
    () => {
      const l = qwen3LoraFile({ name: "x", dims: DEMO_DIMS, rank: 4, seed: 1, strength: 0.5 });
      l.metadata["general.architecture"] = gguf.str("llama");
      writeGguf(`${dir}/lora-arch.gguf`, l.metadata, l.tensors);
      return `${dir}/lora-arch.gguf`;
    },
    AdapterIncompatibleError,
  ],
  [
    "another model's shapes",
    () => {
      const l = qwen3LoraFile({ name: "x", dims: { ...DEMO_DIMS, nFf: 512 }, rank: 4, seed: 1, strength: 0.5 });
      writeGguf(`${dir}/lora-ff.gguf`, l.metadata, l.tensors);
      return `${dir}/lora-ff.gguf`;
    },
    AdapterIncompatibleError,
  ],
  [
    "a lora_a without its lora_b",
    () => {
      const l = qwen3LoraFile({ name: "x", dims: DEMO_DIMS, rank: 4, seed: 1, strength: 0.5 });
      writeGguf(
        `${dir}/lora-half.gguf`,
        l.metadata,
        l.tensors.filter((t) => t.name !== "blk.2.ffn_up.weight.lora_b"),
      );
      return `${dir}/lora-half.gguf`;
    },
    AdapterIncompatibleError,
  ],
  [
    "ranks that disagree",
    () => {
      const l = qwen3LoraFile({ name: "x", dims: DEMO_DIMS, rank: 4, seed: 1, strength: 0.5 });
      writeGguf(
        `${dir}/lora-rank.gguf`,
        l.metadata,
        l.tensors.map((t) =>
          t.name === "blk.0.attn_q.weight.lora_b"
            ? { ...t, shape: [8, 128], data: () => new Uint8Array(8 * 128 * 4) }
            : t,
        ),
      );
      return `${dir}/lora-rank.gguf`;
    },
    AdapterIncompatibleError,
  ],
  [
    "a target the base does not have",
    () => {
      const l = qwen3LoraFile({ name: "x", dims: { ...DEMO_DIMS, nLayer: 6 }, rank: 4, seed: 1, strength: 0.5 });
      writeGguf(`${dir}/lora-layers.gguf`, l.metadata, l.tensors);
      return `${dir}/lora-layers.gguf`;
    },
    AdapterIncompatibleError,
  ],
  [
    "no adapter type",
    () => {
      const l = qwen3LoraFile({ name: "x", dims: DEMO_DIMS, rank: 4, seed: 1, strength: 0.5 });
      delete l.metadata["adapter.type"];
      writeGguf(`${dir}/lora-type.gguf`, l.metadata, l.tensors);
      return `${dir}/lora-type.gguf`;
    },
    AdapterFileError,
  ],
  ["the base model given as an adapter", () => demo.model, AdapterFileError],
];

let engine: LocalEngine;
beforeAll(async () => {
  engine = await demoEngine({ adapters: [] });
});
afterAll(async () => engine?.dispose());

describe("malformed model files never take the process down", () => {
  it(`refuses each of ${MODELS.length} broken base models with the file and a reason`, async () => {
    const results: string[] = [];
    for (const [name, make] of MODELS) {
      const path = make();
      const err = await LocalEngine.load({
        modelPath: path,
        gpu: false,
        threads: TEST_THREADS,
        logger: quietLogger(),
      }).then(
        async (e) => {
          await e.dispose();
          return undefined;
        },
        (e: Error) => e,
      );
      expect(err, name).toBeInstanceOf(ModelFileError);
      expect(err!.message, name).toContain(path);
      results.push(`${name}: ${err!.message.slice(path.length + 8, path.length + 90)}`);
    }
    console.log(`malformed models: ${MODELS.length} tried, ${results.length} refused\n  ${results.join("\n  ")}`);
  });

  it(`refuses each of ${ADAPTERS.length} broken adapters, and the engine keeps serving`, async () => {
    for (const [name, make, kind] of ADAPTERS) {
      const path = make();
      const err = await engine.addAdapter({ alias: "broken", filePath: path, scale: 1 }).catch((e: Error) => e);
      expect(err, name).toBeInstanceOf(kind);
      expect((err as Error).message, name).toContain(path);
    }
    await engine.addAdapter({ alias: "plan", filePath: demo.adapters.plan!, scale: 1 });
    const s = await engine.openSession({ adapter: "plan" });
    const r = await s.generate({ turns: [{ role: "user", text: "still fine?" }], functions: {} }, { maxTokens: 2 });
    expect(r.adapter).toBe("plan");
    await s.close();
    console.log(`malformed adapters: ${ADAPTERS.length} tried, ${ADAPTERS.length} refused`);
  });

  it("the pre-load validation refuses every corpus file before llama.cpp sees it, with nothing but a format error or named problems", () => {
    const verdicts = MODELS.map(([name, make]) => {
      let header: ReturnType<typeof readGgufHeader>;
      try {
        header = readGgufHeader(make());
      } catch (err) {
        expect((err as Error).name, name).toBe("GgufFormatError");
        return [name, "format"];
      }
      return [name, baseModelProblems(header).length ? "problems" : "valid"];
    });
    // broken structure is a format error; missing or absurd metadata (what aborts llama.cpp) is a named problem;
    // only what takes llama.cpp's own judgement (the probe in a child process, tested above) passes this stage
    const HEADER_BREAKAGES = 15; // the truncations and header-field patches, listed first in MODELS
    const LEFT_TO_THE_PROBE = [
      "unknown architecture",
      "a missing attention tensor",
      "an attention tensor of the wrong shape",
    ];
    expect(Object.fromEntries(verdicts)).toEqual(
      Object.fromEntries(
        MODELS.map(([name], i) => [
          name,
          i < HEADER_BREAKAGES ? "format" : LEFT_TO_THE_PROBE.includes(name) ? "valid" : "problems",
        ]),
      ),
    );
  });
});
