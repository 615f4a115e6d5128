import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import { call, callError, connectClient, startHttpServer, testConfig, type HttpServer } from "../helpers/server.js";

const dir = tempDir();
const tokenFile = join(dir, "tokens.txt");
writeFileSync(tokenFile, "alice:alice-token-0123456789abcdef\nbob:bob-token-0123456789abcdef0\n");
const as = (name: "alice" | "bob") => ({
  authorization: `Bearer ${name === "alice" ? "alice-token-0123456789abcdef" : "bob-token-0123456789abcdef0"}`,
});
// 0.03 minutes = 1.8 s of idling (the sweeper looks every quarter of that)
const config = testConfig({
  server: { tokenFile },
  sessions: { idleMinutes: 0.03 },
  harness: { traceDir: join(dir, "traces"), maxTokensPerTurn: 8 },
});
let first: HttpServer;
beforeAll(async () => {
  first = await startHttpServer([], config);
});
afterAll(async () => first?.stop());

describe("sessions and traces over time", () => {
  it("an idle session expires after sessions.idleMinutes; one in use does not", async () => {
    const c = await connectClient("http", first, as("alice"));
    try {
      const idle = (await call<{ session_id: string }>(c.client, "create_session", { task: "left alone" })).session_id;
      const busy = (await call<{ session_id: string }>(c.client, "create_session", { task: "kept busy" })).session_id;
      const started = Date.now();
      // the busy one is used every 400 ms (a recorded tool call counts as activity) until the idle one is gone
      let expiredAfter = 0;
      while (!expiredAfter) {
        await call(c.client, "search", { query: "river", session_id: busy });
        const gone = await callError(c.client, "get_session", { session_id: idle }).catch(() => "");
        if (/no session/.test(gone)) expiredAfter = Date.now() - started;
        else await new Promise((r) => setTimeout(r, 400));
        if (Date.now() - started > 30_000) throw new Error("the idle session never expired");
      }
      expect(expiredAfter).toBeGreaterThanOrEqual(1_800);
      expect(
        (await call<{ history: unknown[] }>(c.client, "get_session", { session_id: busy })).history.length,
      ).toBeGreaterThan(2);
      const { resources } = await c.client.listResources();
      expect(resources.map((r) => r.uri)).toEqual(expect.arrayContaining([`weact://sessions/${busy}`]));
      expect(resources.map((r) => r.uri)).not.toContain(`weact://sessions/${idle}`);
    } finally {
      await c.close();
    }
  });

  it("a client's traces stay visible to it, and only to it, after the server restarts", async () => {
    let traceUri: string;
    try {
      const alice = await connectClient("http", first, as("alice"));
      const run = await call<{ trace_uri: string }>(
        alice.client,
        "run_task",
        { task: "remember me", policy: "base", soft: { turns: 1 } },
        { timeout: 120_000 },
      );
      traceUri = run.trace_uri;
      await alice.close();
    } finally {
      await first.stop();
    }

    const second = await startHttpServer([], config);
    try {
      const alice = await connectClient("http", second, as("alice"));
      const bob = await connectClient("http", second, as("bob"));
      try {
        expect((await alice.client.listResources()).resources.map((r) => r.uri)).toContain(traceUri);
        const events = JSON.parse(
          ((await alice.client.readResource({ uri: traceUri })).contents[0] as { text: string }).text,
        ) as { type: string; task?: string }[];
        expect(events[0]).toMatchObject({ type: "run_start", task: "remember me" });
        expect(events.at(-1)).toMatchObject({ type: "run_end" });
        expect((await bob.client.listResources()).resources.map((r) => r.uri)).not.toContain(traceUri);
        await expect(bob.client.readResource({ uri: traceUri })).rejects.toThrow();
      } finally {
        await alice.close();
        await bob.close();
      }
    } finally {
      await second.stop();
    }
  });
});
