import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CacheStats, DecodeRoundStats } from "../../src/engine/index.js";
import { readTaskFile } from "../../src/harness/eval/TaskFile.js";
import { TRAINED_DIR } from "../../src/paths.js";
import { BusySessions, QWEN_BUSY_TURN, type Overlap } from "../../testkit/busySessions.js";
import { firstDifference, runTaskTurns, type TaskRun } from "../../testkit/taskTurns.js";
import { trainedLibraryCopy } from "../helpers/files.js";
import { connectClient, startHttpServer, testConfig, type Connected, type HttpServer } from "../helpers/server.js";

/**
 * The same session, seed and weights give the same tokens whatever else the server is doing (model.batchInvariant,
 * default true): a held-out task of the trained demo runs with run_task alone, then again on the same server while
 * other sessions generate the whole time (started first, looping until the task ends), so their one-token decodes
 * share the task's decode rounds and their prompts are evaluated between its turns. Every model turn must be
 * byte-identical and the answer the same. `npm run check:invariance` runs every held-out task this way.
 */
const TASK = readTaskFile(join(TRAINED_DIR, "eval-tasks.jsonl")).find((t) => t.id === "unseen-6")!;
const BUSY = 4;

let server: HttpServer;
let c: Connected;
beforeAll(async () => {
  server = await startHttpServer(
    [],
    testConfig({
      // the trained demo as trained-demo.test.ts serves it; room for the task's lanes and every busy session's
      model: { demo: "trained", contextSize: 8192, maxContexts: 4, sequencesPerContext: 8 },
      adapters: { manifest: trainedLibraryCopy().manifest },
    }),
  );
  c = await connectClient("http", server);
});
afterAll(async () => {
  await c?.close();
  await server?.stop();
});

async function decodeRounds(client: Client): Promise<DecodeRoundStats> {
  const result = await client.readResource({ uri: "weact://cache" });
  return (JSON.parse((result.contents[0] as { text: string }).text) as CacheStats).decodeRounds!;
}

describe("a session's tokens do not depend on the server's load", () => {
  it(`run_task (soft, greedy) writes the same model turns alone and beside ${BUSY} busy sessions`, async () => {
    const alone = await runTaskTurns(c.client, TASK.task, "soft");
    expect(alone.turns.length).toBeGreaterThan(3);

    const busy = await BusySessions.start({
      url: server.url,
      sessions: BUSY,
      adapters: ["plan", "search", "write"],
      turn: QWEN_BUSY_TURN,
    });
    let loaded: TaskRun;
    let overlap: Overlap;
    const before = await decodeRounds(c.client);
    try {
      const watch = busy.watch();
      loaded = await runTaskTurns(c.client, TASK.task, "soft");
      overlap = busy.overlap(watch);
    } finally {
      await busy.stop();
    }
    const after = await decodeRounds(c.client);

    // the load was real: busy turns in flight nearly all the time; and each decode was a round of its own
    // (model.batchInvariant: one-token decodes of several sessions in one batch move a log-prob)
    expect(overlap.share).toBeGreaterThan(0.9);
    expect(overlap.turns).toBeGreaterThan(2 * BUSY);
    expect(after.rounds - before.rounds).toBeGreaterThan(100);
    expect(after.decodes - before.decodes).toBe(after.rounds - before.rounds);

    const difference = firstDifference(alone, loaded);
    expect(
      difference,
      difference && `model turn ${difference.turn} (${difference.stage}) changed under load: ${difference.detail}`,
    ).toBeUndefined();
    expect({ finish: loaded.finish, answer: loaded.answer }).toEqual({ finish: alone.finish, answer: alone.answer });
  });
});
