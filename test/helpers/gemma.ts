import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { ChatTurn, Conversation } from "../../src/engine/index.js";
import { loadManifest } from "../../src/library/manifest.js";
import { exchangeMessage, LOAD_LORA, OFFLOAD_LORA, weightFunctions } from "../../src/library/weightActions.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { readTaskFile, type EvalTask } from "../../src/harness/eval/TaskFile.js";
import { gemmaTestAdapters, type RealModelAdapters } from "../../testkit/realModelAdapters.js";
import { fetchModel } from "../../src/modelFiles/index.js";
import { quietLogger } from "./engine.js";
import { call } from "./server.js";

export interface GemmaSet {
  model: string;
  adapters: RealModelAdapters;
}

/**
 * Gemma 3 270M and its test adapters: fetched once per machine (`weact-mcp fetch-model`'s cache), never skipped: a
 * fetch that fails fails the tests with its error.
 */
export async function gemma(): Promise<GemmaSet> {
  const model = await fetchModel("gemma-3-270m", { logger: quietLogger() });
  return { model, adapters: gemmaTestAdapters(model) };
}

/** A trace event as the harness writes it (one JSON line of TRACE_DIR/<trace_id>.jsonl). */
export type TraceEvent = { type: string } & Record<string, unknown>;

/**
 * One task of a library's held-out file run under hard over MCP (greedy, seed 1, no steering): the run's result and
 * the events of its trace.
 */
export async function hardRun(
  client: Client,
  tasksFile: string,
  id: string,
  traceDir: string,
): Promise<{
  task: EvalTask;
  run: { stages: string[]; finish: string; answer: string; trace_id: string };
  events: TraceEvent[];
}> {
  const task = readTaskFile(tasksFile).find((t) => t.id === id)!;
  const run = await call<{ stages: string[]; finish: string; answer: string; trace_id: string }>(
    client,
    "run_task",
    { task: task.task, policy: "hard", seed: 1 },
    { timeout: 300_000 },
  );
  const events = readFileSync(join(traceDir, `${run.trace_id}.jsonl`), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as TraceEvent);
  return { task, run, events };
}

/** The shipped activated-LoRA library of Gemma 3 270M. */
export const GEMMA_ALORA_DIR = join(PACKAGE_ROOT, "models", "gemma3-alora");

/**
 * A short history over the shipped aLoRA library, its load and release exchanges as the server renders them (the
 * manifest's texts): a question, then `planned` (plan loaded, its turn) and `handedOver` (plan released).
 */
export function aloraHistory() {
  const entries = loadManifest(join(GEMMA_ALORA_DIR, "manifest.json"));
  const entry = (alias: string) => entries.find((e) => e.alias === alias)!;
  const exchange = (alias: string, action: string, args: Record<string, unknown>): ChatTurn => ({
    role: "assistant",
    text: "",
    calls: [{ name: action, arguments: args, result: exchangeMessage(entry(alias), action, alias) }],
  });
  const load = (alias: string) => exchange(alias, LOAD_LORA, { adapter: alias });
  const release = (alias: string, handoff: string) => exchange(alias, OFFLOAD_LORA, { handoff });
  const functions = weightFunctions(entries);
  const conversation = (...turns: ChatTurn[]): Conversation => ({
    functions,
    turns: [
      { role: "system", text: "You answer questions with the capabilities you load." },
      { role: "user", text: "Which river flows through Paris?" },
      ...turns,
    ],
  });
  const planned = [load("plan"), { role: "assistant" as const, text: "Goal: the river of Paris. Next: search." }];
  const handedOver = [...planned, release("plan", "search for the river of Paris")];
  /** An alias's file in the library. */
  const file = (alias: string) => join(GEMMA_ALORA_DIR, entry(alias).file);
  return { entries, file, load, release, conversation, planned, handedOver };
}
