import { LlamaLogLevel, type LlamaContextSequence, type Token } from "node-llama-cpp";
import type { BindingSetting } from "../src/llamaCpp/binding.js";
import { loadLlama } from "../src/llamaCpp/startLlama.js";

export interface SpeedOptions {
  modelPath: string;
  binding: BindingSetting;
  threads: number;
  /** Prompt tokens each sequence prefills (one decode of that many tokens per sequence). Default 512. */
  prefillTokens?: number;
  /** Tokens each sequence generates, one decode each (greedy). Default 64. */
  decodeTokens?: number;
  /** Sequences of the batched figures. Default 4. */
  batch?: number;
}

export interface SpeedFigures {
  /** The binding that loaded ("prebuilt" or "source"). */
  binding: string;
  threads: number;
  prefillTokens: number;
  decodeTokens: number;
  batch: number;
  /** One sequence: prompt tokens per second. */
  prefill1TokPerS: number;
  /** `batch` sequences prefilled at once: their prompt tokens per second, together. */
  prefillBatchTokPerS: number;
  /** One sequence: generated tokens per second (one-token decodes). */
  decode1TokPerS: number;
  /** `batch` sequences generating at once (one decode carries a token of each): tokens per second, together. */
  decodeBatchTokPerS: number;
}

/**
 * llama.cpp's raw speed on `modelPath` with one binding, through node-llama-cpp's public API: no sessions, adapters or
 * chat template, the figures `npm run bench -- --scenario binding` compares across bindings (in one process per
 * binding: a process loads one). Prefill is one evaluation of `prefillTokens` prompt tokens; decode generates
 * `decodeTokens` greedily after a short prompt; the batched figures run `batch` sequences of one context at once, which
 * node-llama-cpp evaluates in shared decodes. Each figure is the median of `reps` after one warm-up.
 */
export async function measureLlamaSpeed(options: SpeedOptions, reps = 3): Promise<SpeedFigures> {
  const prefillTokens = options.prefillTokens ?? 512;
  const decodeTokens = options.decodeTokens ?? 64;
  const batch = options.batch ?? 4;
  const { llama, binding } = await loadLlama({
    binding: options.binding,
    gpu: false,
    maxThreads: 0, // every context runs with exactly `threads`
    logLevel: LlamaLogLevel.error,
    logger: (_level, message) => void process.stderr.write(message.endsWith("\n") ? message : `${message}\n`),
  });
  try {
    const model = await llama.loadModel({ modelPath: options.modelPath, gpuLayers: 0 });
    const context = await model.createContext({
      sequences: batch,
      contextSize: batch * (prefillTokens + decodeTokens + 64),
      batchSize: Math.max(512, prefillTokens),
      threads: options.threads,
    });
    const sequences: LlamaContextSequence[] = [];
    for (let i = 0; i < batch; i++) sequences.push(context.getSequence());
    // ordinary text, so the prompt is made of ordinary tokens
    const text = "The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly. ";
    let prompt = model.tokenize(text.repeat(8), false);
    while (prompt.length < prefillTokens) prompt = prompt.concat(prompt);
    prompt = prompt.slice(0, prefillTokens);
    const promptOf = (i: number): Token[] => [...prompt.slice(i), ...prompt.slice(0, i)]; // no shared prefix

    const timed = async (fn: () => Promise<void>) => {
      await Promise.all(sequences.map((s) => s.clearHistory()));
      const started = performance.now();
      await fn();
      return (performance.now() - started) / 1000;
    };
    const prefill = (n: number) =>
      timed(async () => {
        await Promise.all(sequences.slice(0, n).map((s, i) => s.evaluateWithoutGeneratingNewTokens(promptOf(i))));
      });
    // 8 prompt tokens first, untimed; then each sequence feeds its last token again and generates: one decode per token
    const decode = async (n: number) => {
      await Promise.all(sequences.map((s) => s.clearHistory()));
      const used = sequences.slice(0, n);
      await Promise.all(used.map((s, i) => s.evaluateWithoutGeneratingNewTokens(promptOf(i).slice(0, 8))));
      const started = performance.now();
      await Promise.all(
        used.map(async (s) => {
          let left = decodeTokens;
          for await (const _token of s.evaluate([s.contextTokens.at(-1)!], { temperature: 0 })) if (--left === 0) break;
        }),
      );
      return (performance.now() - started) / 1000;
    };
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const rate = async (tokens: number, run: () => Promise<number>) => {
      await run(); // warm-up
      const seconds: number[] = [];
      for (let r = 0; r < reps; r++) seconds.push(await run());
      return Math.round((10 * tokens) / median(seconds)) / 10;
    };
    return {
      binding: binding.kind,
      threads: options.threads,
      prefillTokens,
      decodeTokens,
      batch,
      prefill1TokPerS: await rate(prefillTokens, () => prefill(1)),
      prefillBatchTokPerS: await rate(batch * prefillTokens, () => prefill(batch)),
      decode1TokPerS: await rate(decodeTokens, () => decode(1)),
      decodeBatchTokPerS: await rate(batch * decodeTokens, () => decode(batch)),
    };
  } finally {
    await llama.dispose();
  }
}
