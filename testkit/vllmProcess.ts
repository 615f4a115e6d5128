import { join } from "node:path";
import { PACKAGE_ROOT } from "../src/paths.js";
import { PROGRESS_EVERY_MS, runWithProgress } from "./buildProgress.js";
import { freePort, spawnEngine, type EngineProcess } from "./engineProcess.js";

/**
 * Starts and stops a real vLLM (its CPU build from PyPI) through scripts/vllm-serve.sh, for the vLLM suite and the
 * concurrency bench: the engine the remote backend's vLLM flavor talks to.
 */

const SCRIPT = join(PACKAGE_ROOT, "scripts", "vllm-serve.sh");

export interface VllmOptions {
  /** A known model name (fetched once) or a GGUF file: scripts/vllm-serve.sh --model. */
  model?: string;
  /** 0 or absent: a free loopback port. */
  port?: number;
  /** Adapters in one batch (--max-loras). */
  maxLoras?: number;
  maxLoraRank?: number;
  maxModelLen?: number;
  /** Top log-probs a request may ask for (--max-logprobs). */
  maxLogprobs?: number;
  /** CPU threads (default: every core). */
  threads?: number;
  /** Anything else for vLLM, appended as given. */
  extraArgs?: readonly string[];
}

export interface Vllm extends EngineProcess {
  /** The name it serves the base model under. */
  readonly model: string;
}

/**
 * The Python environment and the model's Hugging Face form, made once per machine (about 3 minutes and 6.3 GB, then
 * about 70 s for the model), with a progress line on stderr every 30 s while that runs; returns the model's folder.
 */
export async function prepareVllm(model = "gemma-3-270m"): Promise<string> {
  const stdout = await runWithProgress("bash", [SCRIPT, "--model", model, "--prepare"], {
    label: "vLLM environment",
    intro: `making vLLM's Python environment and ${model}'s Hugging Face form, once per machine: about 5 minutes (later runs reuse them from ~/.cache/weact-mcp); a progress line every ${PROGRESS_EVERY_MS / 1000} s`,
    timeoutMs: 30 * 60_000,
  });
  return stdout.trim().split("\n").at(-1)!;
}

/**
 * vLLM on loopback, ready to serve: its health route answers, and the structured-output backend has compiled its
 * tables for this vocabulary (about 25 s for Gemma 3's 262k tokens on 2 cores the first time a grammar is used,
 * which would otherwise land in the first timed request).
 */
export async function startVllm(opts: VllmOptions = {}): Promise<Vllm> {
  const running = process.env.WEACT_VLLM_URL;
  if (running) return runningVllm(running);
  const model = opts.model ?? "gemma-3-270m";
  await prepareVllm(model);
  const port = opts.port || (await freePort());
  const args = [
    SCRIPT,
    "--model",
    model,
    "--port",
    String(port),
    ...(opts.maxLoras ? ["--max-loras", String(opts.maxLoras)] : []),
    ...(opts.maxLoraRank ? ["--max-lora-rank", String(opts.maxLoraRank)] : []),
    ...(opts.maxModelLen ? ["--max-model-len", String(opts.maxModelLen)] : []),
    ...(opts.maxLogprobs ? ["--max-logprobs", String(opts.maxLogprobs)] : []),
    ...(opts.threads ? ["--threads", String(opts.threads)] : []),
    ...(opts.extraArgs?.length ? ["--", ...opts.extraArgs] : []),
  ];
  const server = await spawnEngine({
    label: "vLLM",
    command: "bash",
    args,
    port,
    healthPath: "/health",
    startTimeoutMs: 5 * 60_000,
  });
  const name = await servedModel(server.url);
  const warm = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: name,
      prompt: [2],
      max_tokens: 1,
      structured_outputs: { grammar: 'root ::= "a"' },
    }),
  });
  if (!warm.ok) {
    await server.stop();
    throw new Error(`vLLM refused a grammar request: HTTP ${warm.status} ${await warm.text()}`);
  }
  return { ...server, model: name };
}

const servedModel = async (url: string) =>
  ((await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id;

/**
 * A vLLM started by hand (WEACT_VLLM_URL, e.g. `bash scripts/vllm-serve.sh --port 8000 --max-lora-rank 8`): the
 * suite runs against it without starting its own, and leaves it running.
 */
async function runningVllm(url: string): Promise<Vllm> {
  const { port } = new URL(url);
  return {
    url: url.replace(/\/$/, ""),
    port: Number(port),
    pid: 0,
    args: [],
    model: await servedModel(url),
    log: () => "",
    pause: () => {
      throw new Error("WEACT_VLLM_URL: a vLLM this suite did not start is not paused by it");
    },
    resume: () => {},
    stop: async () => {},
  };
}
