import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { callTool, connectClient } from "../testkit/mcpClient.js";
import { readTaskFile } from "../src/harness/eval/TaskFile.js";
import { PACKAGE_ROOT } from "../src/paths.js";

/**
 * `npm run check:runs`: the full sweep the test suite samples. Every demo task under hard and soft, seeds 1 to
 * N, at the default window and at a small one, over a spawned server (stdio, the real engine): no run may fail
 * on the window. Then steering: `generate {tool_call: {name}}` for every tool the state allows, under every
 * demo adapter and the base, must yield a parsed call of that tool within max_tokens, with no token_bias.
 * Prints a summary per window and policy; exits 1 on any failure.
 */
const { values } = parseArgs({
  options: {
    seeds: { type: "string", default: "10" },
    windows: { type: "string", default: "8192,2048" },
    "max-tokens": { type: "string", default: "256" },
  },
});
const seeds = Number(values.seeds);
const windows = values.windows!.split(",").map(Number);
const maxTokens = Number(values["max-tokens"]);
const tasks = readTaskFile(join(PACKAGE_ROOT, "src", "harness", "eval", "demo-tasks.jsonl"));
const failures: string[] = [];
const dir = mkdtempSync(join(tmpdir(), "weact-check-"));

async function server(contextSize: number) {
  const config = join(dir, `config-${contextSize}.json`);
  writeFileSync(
    config,
    JSON.stringify({ model: { gpu: false, contextSize, demo: "random" }, harness: { traceDir: join(dir, "traces") } }),
  );
  return connectClient("stdio", { serverArgs: ["--config", config] });
}

for (const window of windows) {
  const c = await server(window);
  for (const policy of ["hard", "soft"]) {
    const finishes: Record<string, number> = {};
    let seconds = 0;
    for (const task of tasks) {
      for (let seed = 1; seed <= seeds; seed++) {
        const started = Date.now();
        try {
          const r = await callTool<{ finish: string; stages: string[] }>(
            c.client,
            "run_task",
            { task: task.task, policy, seed, steering: task.steering },
            { timeout: 3_600_000, resetTimeoutOnProgress: true },
          );
          finishes[r.finish] = (finishes[r.finish] ?? 0) + 1;
          if (r.finish === "error") failures.push(`window ${window} ${policy} ${task.id} seed ${seed}: finish error`);
        } catch (err) {
          finishes.failed = (finishes.failed ?? 0) + 1;
          failures.push(`window ${window} ${policy} ${task.id} seed ${seed}: ${(err as Error).message}`);
        }
        seconds += (Date.now() - started) / 1000;
      }
    }
    process.stdout.write(
      `runs    window ${window} ${policy}: ${tasks.length * seeds} runs, ${JSON.stringify(finishes)}, ${seconds.toFixed(0)} s\n`,
    );
  }
  await c.close();
}

// steering: every tool the state allows, under every demo adapter and the base
// steering needs room for the prompt and a call: the default window at least
const c = await server(Math.max(8192, ...windows));
const probe = await callTool<{ session_id: string; tools: string[] }>(c.client, "create_session", { task: "probe" });
await callTool(c.client, "close_session", { session_id: probe.session_id });
const tools = probe.tools;
let steered = 0;
for (const adapter of [null, "plan", "search", "write"]) {
  for (const tool of [adapter === null ? "load_lora" : "offload_lora", ...tools]) {
    for (let seed = 1; seed <= seeds; seed++) {
      const { session_id } = await callTool<{ session_id: string }>(c.client, "create_session", {
        task: "Which river flows through Paris?",
      });
      try {
        if (adapter) await callTool(c.client, "load_lora", { session_id, adapter });
        const turn = await callTool<{ tool_calls: { name: string }[]; tokens: { generated: number } }>(
          c.client,
          "generate",
          { session_id, tool_call: { name: tool }, max_tokens: maxTokens, seed, temperature: 0.7 },
          { timeout: 600_000, resetTimeoutOnProgress: true },
        );
        const ok =
          turn.tool_calls.length === 1 && turn.tool_calls[0]!.name === tool && turn.tokens.generated <= maxTokens;
        if (ok) steered++;
        else
          failures.push(
            `steer ${tool} under ${adapter ?? "base"} seed ${seed}: ${JSON.stringify(turn.tool_calls)} generated ${turn.tokens.generated}`,
          );
      } catch (err) {
        failures.push(`steer ${tool} under ${adapter ?? "base"} seed ${seed}: ${(err as Error).message}`);
      } finally {
        await callTool(c.client, "close_session", { session_id });
      }
    }
  }
}
await c.close();
process.stdout.write(
  `steering: ${steered} parsed calls of the named tool within max_tokens ${maxTokens}; ${failures.filter((f) => f.startsWith("steer")).length} failures\n`,
);
for (const f of failures) process.stdout.write(`FAIL ${f}\n`);
process.exit(failures.length ? 1 : 0);
