import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { judge } from "../../src/harness/answer.js";
import { readTaskFile } from "../../src/harness/eval/TaskFile.js";
import { TRAINED_DIR, trainedLibrary } from "../../src/paths.js";
import { trainedLibraryCopy } from "../helpers/files.js";
import { factAsked } from "../helpers/readme.js";
import { LONG, readTrace, type Generated, type RunResult, type SessionState } from "../helpers/results.js";
import { call, connectClient, testConfig, type Connected } from "../helpers/server.js";

/**
 * The paper's modular continual adaptation on a live server with the trained demo library (models/trained: its
 * manifest's plan, search and write, and beside them the code capability and write++ its continuation steps trained):
 * a client drives the loop by hand until the model ends its own turn; the code capability is registered while sessions run; write is
 * refreshed to write++ while a session is mid-stage. Nothing is steered: every turn is the model's.
 */
const { dir: lib, manifest } = trainedLibraryCopy();
const CODE_ENTRY = JSON.parse(readFileSync(join(lib, "code.entry.json"), "utf8")) as Record<string, unknown>;
/** The first held-out computation task (a difference of two values the corpus states). */
const COMPUTATION = readTaskFile(trainedLibrary(TRAINED_DIR).computationTasks)[0]!;
const WORKFLOW_WITH_CODE = ["plan", "search", "code", "write"];
/** A held-out phrasing about an entity training never saw. */
const TASK = "I would like to learn the country of Wuhan.";

let c: Connected;
beforeAll(async () => {
  // over stdio: the admin tools need no token there
  c = await connectClient(
    "stdio",
    undefined,
    {},
    testConfig({ model: { path: join(lib, "weact-demo-trained.gguf"), contextSize: 8192 }, adapters: { manifest } }),
  );
});
afterAll(async () => {
  await c?.close();
});

interface Listing {
  adapters: { alias: string; sha256: string; description: string }[];
  base_model: { sha256: string };
}
const hashes = async () => {
  const l = await call<Listing>(c.client, "list_adapters");
  return { base: l.base_model.sha256, ...Object.fromEntries(l.adapters.map((a) => [a.alias, a.sha256])) };
};
const generate = (session_id: string, extra: Record<string, unknown> = {}) =>
  call<Generated>(c.client, "generate", { session_id, max_tokens: 96, ...extra }, LONG);
const session = (session_id: string) => call<SessionState>(c.client, "get_session", { session_id });
interface Switched {
  switch: { rebuilt_tokens: number; reused_tokens: number };
}

/**
 * The README's loop: generate, answer each call by its id, until the model writes a turn with no call. Returns every
 * turn; gives up after `limit` turns.
 */
async function driveByHand(session_id: string, limit = 16, stopBefore?: (t: Generated) => boolean) {
  const turns: Generated[] = [];
  while (turns.length < limit) {
    const turn = await generate(session_id);
    turns.push(turn);
    if (!turn.tool_calls.length) break;
    if (stopBefore?.(turn)) break;
    for (const t of turn.tool_calls) await call(c.client, t.name, { session_id, call_id: t.id }, LONG);
  }
  return turns;
}
const answerOf = (turns: readonly Generated[]) =>
  turns.map((t) => /^Answer:\s*(.*)$/m.exec(t.text)?.[1]).find((a) => a !== undefined);

describe("a client driving the loop by hand", () => {
  it("gets the answer from write's turn, and the base then ends its turn by itself", async () => {
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", { task: TASK });
    const turns = await driveByHand(session_id);
    const last = turns.at(-1)!;
    // the model's own final turn: on the base, no call
    expect(last).toMatchObject({ adapter: null, tool_calls: [], finish_reason: "stop" });
    expect(turns.map((t) => t.adapter)).toEqual([null, "plan", null, "search", "search", null, "write", null]);
    const release = turns.find((t) => t.adapter === "write")!.tool_calls[0]!;
    const answer = answerOf(turns)!;
    expect(judge(answer, factAsked(TASK).value)).toMatchObject({ exact: true });
    // the write stage releases with a call that parses, a short handoff in its argument (what it holds is the
    // model's: TRAINING.md gives how often it is the answer)
    expect(release).toMatchObject({
      name: "offload_lora",
      arguments: { handoff: expect.stringMatching(/^\S.{0,60}$/) },
    });
    expect((await session(session_id)).pending_calls).toEqual([]);
    await call(c.client, "close_session", { session_id });
  });
});

describe("continual adaptation on a live server", () => {
  it("registers code while sessions run: they are undisturbed, new ones document it, a run can use it, nothing else changes", async () => {
    const before = await hashes();
    // two sessions with the same history so far, the base about to choose its next capability
    const running = await Promise.all(
      [0, 1].map(async () => {
        const { session_id } = await call<{ session_id: string }>(c.client, "create_session", {
          task: COMPUTATION.task,
        });
        return session_id;
      }),
    );
    const nextLogprobs = async (session_id: string) =>
      (await generate(session_id, { max_tokens: 1, top_logprobs: 5 })).logprobs;
    const undisturbed = await nextLogprobs(running[0]!);

    const { registered } = await call<{ registered: { alias: string } }>(c.client, "register_adapter", CODE_ENTRY);
    expect(registered).toMatchObject({ alias: "code" });

    // the session that ran before the insertion computes what it would have: same prompt, same weights
    expect(await nextLogprobs(running[1]!)).toEqual(undisturbed);
    // a new session's prompt documents the code capability (its load_lora enum and description)
    const { session_id: fresh } = await call<{ session_id: string }>(c.client, "create_session", {
      task: COMPUTATION.task,
    });
    const promptOf = async (id: string) =>
      (await call<SessionState>(c.client, "get_session", { session_id: id, include_prompt_tokens: true }))
        .prompt_tokens!.length;
    expect(await promptOf(fresh)).toBeGreaterThan(await promptOf(running[1]!));
    const { tools } = await c.client.listTools();
    const loadLora = tools.find((t) => t.name === "load_lora")!.inputSchema.properties as Record<
      string,
      { enum: string[] }
    >;
    expect(loadLora.adapter!.enum).toContain("code");

    // a run can prescribe it at once: the code stage runs on its own weights (whether it gets the difference right is
    // the eval's to say: TRAINING.md)
    const withCode = await call<RunResult>(
      c.client,
      "run_task",
      { task: COMPUTATION.task, policy: "hard", workflow: WORKFLOW_WITH_CODE, budgets: { turns: 3, tokens: 160 } },
      LONG,
    );
    expect(withCode.stages).toEqual(WORKFLOW_WITH_CODE);
    const trace = await readTrace(c.client, withCode.trace_uri);
    expect(trace.filter((e) => e.type === "model_call" && e.adapter === "code").length).toBeGreaterThan(0);
    // its prompt listed the four capabilities it loads, in library order
    expect(trace.find((e) => e.type === "history")).toMatchObject({
      capabilities: ["plan", "search", "write", "code"],
    });
    const after = await hashes();
    expect(after).toEqual({ ...before, code: expect.stringMatching(/^[0-9a-f]{64}$/) });
  });

  it("refreshes write to write++ while a session is mid-stage: it finishes on the version it loaded, and a reload gets the new one", async () => {
    const before = await hashes();
    const { session_id } = await call<{ session_id: string }>(c.client, "create_session", { task: TASK });
    // up to the base's call opening write, answered: the old writer is loaded
    const turns = await driveByHand(session_id, 16, (t) => t.tool_calls.some((x) => x.arguments.adapter === "write"));
    const open = turns.at(-1)!.tool_calls[0]!;
    await call(c.client, "load_lora", { session_id, call_id: open.id }, LONG);

    const { current } = await call<{ current: { sha256: string } }>(c.client, "refresh_adapter", {
      alias: "write",
      file: "write-plus.gguf",
    });
    const refreshed = await hashes();
    expect(refreshed).toEqual({ ...before, write: current.sha256 });
    expect(current.sha256).not.toBe(before.write);

    // the stage in progress keeps the weights it loaded: the old writer answers, right and citing nothing
    const old = await generate(session_id);
    expect(old.adapter).toBe("write");
    expect(judge(answerOf([old]) ?? "", factAsked(TASK).value)).toMatchObject({ exact: true });
    expect(old.text).not.toMatch(/^Evidence: /m);
    await call(c.client, "offload_lora", { session_id, call_id: old.tool_calls[0]!.id }, LONG);
    // loading write again in the same session gets write++ on a new lane: nothing computed under the old version (its
    // lane, its shared prefix) is reused, the whole history is evaluated under the new weights
    const history = (await call<SessionState>(c.client, "get_session", { session_id, include_prompt_tokens: true }))
      .prompt_tokens!.length;
    const reload = await call<Switched>(c.client, "load_lora", { session_id, adapter: "write" }, LONG);
    expect(reload.switch).toMatchObject({ reused_tokens: 0 });
    expect(reload.switch.rebuilt_tokens).toBeGreaterThanOrEqual(history);
    const plus = await generate(session_id);
    // write++'s own form, which the old writer never writes: an evidence line (what it quotes after this unusual
    // history, a second write stage after an answer, is not checked; a whole run's quote is, below)
    expect(plus).toMatchObject({ adapter: "write", text: expect.stringMatching(/^Evidence: /m) });

    // a whole run on the new writer cites the sentence it answered from
    const run = await call<RunResult & { cited?: boolean }>(c.client, "run_task", { task: TASK, policy: "hard" }, LONG);
    expect(run).toMatchObject({ cited: true });
    // with code in the library, a run of the first workflow still lists only the three it was trained with
    expect((await readTrace(c.client, run.trace_uri)).find((e) => e.type === "history")).toMatchObject({
      capabilities: ["plan", "search", "write"],
    });
    expect(judge(run.answer, factAsked(TASK).value)).toMatchObject({ contains: true });
  });
});
