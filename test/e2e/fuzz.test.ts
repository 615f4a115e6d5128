import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { call, connectClient, startHttpServer, type Connected, type HttpServer } from "../helpers/server.js";

/** Runs per tool: fixed, so the suite's time is a budget (about 20 s on 2 cores). */
const RUNS = 40;

let server: HttpServer;
let me: Connected;
let other: Connected;
let mine: string;
let foreign: string;
let closed: string;

const snapshot = async () => {
  const s = await call<{ active_adapter: string | null; history: unknown[]; pending_calls: unknown[] }>(
    me.client,
    "get_session",
    { session_id: mine },
  );
  return { active: s.active_adapter, history: JSON.stringify(s.history), pending: s.pending_calls.length };
};

const adapters = async () =>
  (
    await call<{ adapters: { alias: string; sha256: string | null; resident: boolean }[] }>(me.client, "list_adapters")
  ).adapters.map((a) => [a.alias, a.sha256, a.resident]);

beforeAll(async () => {
  server = await startHttpServer();
  [me, other] = await Promise.all([connectClient("http", server), connectClient("http", server)]);
  mine = (await call<{ session_id: string }>(me.client, "create_session", { task: "the fuzzed session" })).session_id;
  await call(me.client, "load_lora", { session_id: mine, adapter: "plan" });
  foreign = (await call<{ session_id: string }>(other.client, "create_session", { task: "someone else's" })).session_id;
  closed = (await call<{ session_id: string }>(me.client, "create_session", { task: "closed" })).session_id;
  await call(me.client, "close_session", { session_id: closed });
});
afterAll(async () => {
  await me?.close();
  await other?.close();
  await server?.stop();
});

/** Values that are wrong in every way a client can get them wrong. */
const junk = () =>
  fc.oneof(
    fc.string({ maxLength: 50 }),
    fc.string({ minLength: 100_001, maxLength: 100_050 }).map((s) => s), // oversize
    fc.constantFrom("", "\u0000", "\ud800", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "../../etc/passwd", "plan\n", "PLAN", "base", "null"),
    fc.integer(),
    fc.constantFrom(-1, 0, 2 ** 53, -(2 ** 53), 1e308, Number.NaN, Number.POSITIVE_INFINITY),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.array(fc.anything({ maxDepth: 2 }), { maxLength: 3 }),
    fc.letrec((tie) => ({ deep: fc.oneof({ depthSize: "small" }, fc.constant({}), fc.record({ a: tie("deep") })) }))
      .deep,
    fc.dictionary(fc.string({ maxLength: 8 }), fc.anything({ maxDepth: 1 }), { maxKeys: 4 }),
  );
const sessionIds = () =>
  fc.oneof(
    junk(),
    fc.constantFrom("s_unknown", "s_" + "A".repeat(24)),
    { arbitrary: fc.constant(foreign), weight: 2 },
    fc.constant(closed),
  );

/** The tools and the argument fields they take; every field gets junk, session ids get wrong ones too. */
const TOOLS: Record<string, string[]> = {
  create_session: ["task", "system", "tools"],
  generate: ["session_id", "max_tokens", "temperature", "seed", "top_logprobs", "token_bias", "tool_call"],
  load_lora: ["session_id", "adapter", "call_id"],
  offload_lora: ["session_id", "adapter", "call_id", "handoff"],
  get_session: ["session_id", "include_prompt_tokens"],
  close_session: ["session_id"],
  search: ["query", "top_k", "session_id", "call_id"],
  read: ["id_or_url", "session_id", "call_id"],
  run_code: ["language", "code", "stdin", "timeout_s", "session_id", "call_id"],
  run_task: ["task", "policy", "workflow", "budgets", "soft", "seed", "steering"],
  register_adapter: ["alias", "file", "description", "scale"],
  refresh_adapter: ["alias", "file"],
  unregister_adapter: ["alias"],
};

/**
 * Valid values mixed into the junk, so that calls get past the schema and reach the checks behind it (a session id
 * that is not this client's must look missing). Never for the admin tools or run_task: a valid call of those is
 * not a fuzz case but real work.
 */
const VALID: Record<string, unknown> = {
  query: "river",
  top_k: 2,
  id_or_url: "computing/gguf.md",
  max_tokens: 2,
  adapter: "plan",
  language: "python",
  code: "print(1)",
  timeout_s: 2,
};
const argsFor = (tool: string, fields: string[]) =>
  fc.record(
    Object.fromEntries(
      fields.map((f) => [
        f,
        f === "session_id"
          ? sessionIds()
          : f in VALID && !ADMIN_OR_RUN.has(tool)
            ? fc.oneof({ arbitrary: fc.constant(VALID[f]), weight: 3 }, junk())
            : junk(),
      ]),
    ),
    {
      requiredKeys: [],
    },
  );
const ADMIN_OR_RUN = new Set(["register_adapter", "refresh_adapter", "unregister_adapter", "run_task"]);

describe("fuzzed tool arguments through the real MCP client", () => {
  for (const [tool, fields] of Object.entries(TOOLS)) {
    it(`${tool}: every malformed call gets a clear error, the server lives, the session and the library are unchanged`, async () => {
      const before = await snapshot();
      const library = await adapters();
      let errors = 0;
      await fc.assert(
        fc.asyncProperty(argsFor(tool, fields), async (args) => {
          // a session id that is valid and owned would be a legitimate call, not a fuzz case
          if (args.session_id === mine) return;
          if (
            tool === "create_session" &&
            typeof args.task === "string" &&
            args.task.length > 0 &&
            args.task.length <= 100_000
          )
            return;
          const r = await (
            me.client.callTool({ name: tool, arguments: args }, undefined, {
              timeout: 30_000,
            }) as Promise<CallToolResult>
          ).catch((err: Error) => err);
          if (!(r instanceof Error) && !r.isError) {
            // junk that happens to be valid (a search for a random string) may succeed, but never with a session id:
            // the only session this client may use is excluded above, every other one must look missing
            expect(
              args.session_id,
              `${tool} accepted the session id ${JSON.stringify(args.session_id)}`,
            ).toBeUndefined();
            return;
          }
          const text =
            r instanceof Error ? r.message : (r.content as { text?: string }[]).map((x) => x.text ?? "").join(" ");
          errors++;
          expect(text.length).toBeGreaterThan(10);
          expect(text).not.toMatch(/TypeError|ReferenceError|Cannot read properties|undefined is not/);
        }),
        { numRuns: RUNS, seed: 20261130 },
      );
      expect(errors).toBeGreaterThan(0);
      expect(await snapshot()).toEqual(before);
      expect(await adapters()).toEqual(library);
    });
  }

  it("counts", () => {
    console.log(
      `fuzzed ${Object.keys(TOOLS).length} tools x ${RUNS} cases = ${Object.keys(TOOLS).length * RUNS} calls`,
    );
  });
});
