import { execFile } from "node:child_process";
import { copyFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { ARCHITECTURES } from "../../src/demo/architectures.js";
import { FAMILIES } from "../../src/demo/families.js";
import { ensureFamilySet } from "../../src/demo/familySets.js";
import { loraFile } from "../../src/demo/model.js";
import { DEMO_DIMS } from "../../src/demo/qwen3.js";
import { writeGguf } from "../../src/gguf/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir, truncatedCopy } from "../helpers/files.js";
import { MAIN } from "../helpers/server.js";

interface Verdict {
  serves: boolean;
  checks: { check: string; ok: boolean; detail: string }[];
}

async function doctor(model: string, manifest?: string): Promise<{ code: number; verdict: Verdict }> {
  const args = [MAIN, "doctor", model, ...(manifest ? ["--adapters", manifest] : []), "--json"];
  const r = await promisify(execFile)(process.execPath, args, {
    env: { ...process.env, WEACT_LOG_LEVEL: "warn" },
  }).then(
    (ok) => ({ code: 0, stdout: ok.stdout }),
    (err: { code: number; stdout: string }) => ({ code: err.code, stdout: err.stdout }),
  );
  return { code: r.code, verdict: JSON.parse(r.stdout) as Verdict };
}

const failing = (v: Verdict) => v.checks.filter((c) => !c.ok).map((c) => `${c.check}: ${c.detail}`);

describe("weact-mcp doctor", () => {
  it.each(FAMILIES.map((f) => [f.name, f.functionCalls] as const))(
    "%s (F16 + its adapters): serves = %s",
    async (family, serves) => {
      const set = ensureFamilySet(PACKAGE_ROOT, family, "F16");
      const { code, verdict } = await doctor(set.model, set.adapters);
      expect(verdict.serves).toBe(serves);
      expect(code).toBe(serves ? 0 : 1);
      expect(verdict.checks.map((c) => c.check)).toEqual([
        "architecture",
        "quant type",
        "chat wrapper",
        // the one family with sliding-window layers reports its window and model.swaFullCache
        ...(family === "gemma4" ? ["sliding window"] : []),
        "context length",
        "adapter plan",
        "adapter search",
        "adapter write",
        "memory estimate",
        "GPU offload",
      ]);
      if (!serves)
        expect(failing(verdict)).toEqual([
          expect.stringMatching(/^chat wrapper: JinjaTemplate: .*no tool-call syntax/),
        ]);
    },
  );

  it("a broken set: another architecture's adapter, a truncated adapter, a rank mismatch and a truncated model", async () => {
    const set = ensureFamilySet(PACKAGE_ROOT, "qwen2", "Q8_0");
    const dir = tempDir();
    const adapters = dirname(set.adapters);
    copyFileSync(
      join(dirname(ensureFamilySet(PACKAGE_ROOT, "llama", "F16").adapters), "plan.gguf"),
      join(dir, "plan.gguf"),
    );
    truncatedCopy(join(adapters, "search.gguf"), dir, "search.gguf", 0.5);
    const lora = loraFile({
      name: "bad-rank",
      architecture: ARCHITECTURES.qwen2,
      dims: DEMO_DIMS,
      rank: 4,
      seed: 1,
      strength: 0.5,
    });
    const i = lora.tensors.findIndex((t) => t.name.endsWith(".lora_b"));
    lora.tensors[i] = {
      ...lora.tensors[i]!,
      shape: [8, lora.tensors[i]!.shape[1]!],
      data: () => new Uint8Array(8 * lora.tensors[i]!.shape[1]! * 4),
    };
    writeGguf(join(dir, "write.gguf"), lora.metadata, lora.tensors);
    // a good adapter of this model's shapes, recorded for another base (another checkpoint of qwen2)
    copyFileSync(join(adapters, "plan.gguf"), join(dir, "code.gguf"));
    const otherBase = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32";
    const manifest = join(dir, "manifest.json");
    writeFileSync(
      manifest,
      JSON.stringify({
        adapters: ["plan", "search", "write", "code"].map((alias) => ({
          alias,
          description: `the ${alias} adapter`,
          file: `${alias}.gguf`,
          ...(alias === "code" ? { baseSha256: otherBase } : {}),
        })),
      }),
    );

    const { code, verdict } = await doctor(set.model, manifest);
    expect(code).toBe(1);
    expect(failing(verdict)).toEqual([
      expect.stringMatching(/^adapter plan: architecture is llama, the base model is qwen2/),
      expect.stringMatching(/^adapter search: .*past the end of the file/),
      expect.stringMatching(
        /^adapter write: blk\.0\.attn_q\.weight: lora_a \[128,4\] and lora_b \[8,128\] do not share a rank/,
      ),
      expect.stringMatching(
        new RegExp(`^adapter code: made for the base model with SHA-256 ${otherBase}, not this one \\([0-9a-f]{64}\\)`),
      ),
    ]);

    const truncated = await doctor(truncatedCopy(set.model, dir, "model.gguf", 0.6), set.adapters);
    expect(truncated.code).toBe(1);
    expect(failing(truncated.verdict)).toEqual([expect.stringMatching(/^model file: .*past the end of the file/)]);
  });
});
