import { Client as Client2026, StreamableHTTPClientTransport as Transport2026 } from "@modelcontextprotocol/client";
import type { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnHttpServer } from "../../testkit/mcpClient.js";
import { OWNER_KEY_META } from "../../src/mcp/owners.js";
import { call, callError, connectClient, testConfig, type Connected, type HttpServer } from "../helpers/server.js";

/** A token-less server whose unused sessions idle out after 6 s (sessions.idleMinutes 0.1). */
let server: HttpServer;
beforeAll(async () => {
  server = await spawnHttpServer(["--config", testConfig({ sessions: { idleMinutes: 0.1 } })]);
});
afterAll(async () => server?.stop());

/** Ends a Streamable HTTP connection as a client does when it is done: DELETE /mcp, then the client's side. */
async function endConnection(c: Connected): Promise<void> {
  await (c.client.transport as StreamableHTTPClientTransport).terminateSession();
  await c.close();
}

/** The ids of the open sessions, as the status page of a token-less loopback server lists them (all of them). */
const openSessions = async () =>
  (
    (await (await fetch(`${server.url}/status.json`)).json()) as { sessions: { mine: { id: string }[] } }
  ).sessions.mine.map((s) => s.id);

const open = (c: Connected, args: Record<string, unknown> = {}) =>
  call<{ session_id: string; owner_key?: string }>(c.client, "create_session", { task: "Who wrote it?", ...args });

describe("sessions owned without a token", () => {
  it("outlive the connection that opened them once their key is sent back; another connection reaches them only with that owner_key", async () => {
    const alice = await connectClient("http", server);
    const first = await open(alice);
    const second = await open(alice);
    // one key per connection, returned with each session; the connection itself needs none (the README's loop)
    expect(first.owner_key).toMatch(/^wk_[A-Za-z0-9_-]{48}$/);
    expect(second.owner_key).toBe(first.owner_key);
    await call(alice.client, "generate", { session_id: first.session_id, max_tokens: 1 });
    // the key sent back once: the client holds it, so its sessions are no longer the connection's alone
    await call(alice.client, "get_session", { session_id: first.session_id, owner_key: first.owner_key });
    await endConnection(alice);

    // a new connection, over the other HTTP transport: its own identity, none of alice's sessions
    const later = await connectClient("sse", server);
    try {
      expect(await callError(later.client, "get_session", { session_id: first.session_id })).toMatch(
        /session_not_found/,
      );
      expect((await later.client.listResources()).resources.map((r) => r.uri)).not.toContain(
        `weact://sessions/${first.session_id}`,
      );
      // with the key: the sessions, a model call, the resource (its _meta), and a new session under the same key
      const key = first.owner_key!;
      const state = await call<{ history: unknown[] }>(later.client, "get_session", {
        session_id: first.session_id,
        owner_key: key,
      });
      expect(state.history.length).toBeGreaterThan(2); // system, user, the generated turn
      await call(later.client, "generate", { session_id: second.session_id, owner_key: key, max_tokens: 1 });
      const listed = await later.client.listResources({ _meta: { [OWNER_KEY_META]: key } });
      expect(listed.resources.map((r) => r.uri)).toEqual(
        expect.arrayContaining([`weact://sessions/${first.session_id}`, `weact://sessions/${second.session_id}`]),
      );
      const read = await later.client.readResource({
        uri: `weact://sessions/${second.session_id}`,
        _meta: { [OWNER_KEY_META]: key },
      });
      expect(JSON.parse((read.contents[0] as { text: string }).text)).toMatchObject({ session_id: second.session_id });
      const third = await open(later, { owner_key: key });
      expect(third.owner_key).toBe(key);

      // a key the server did not issue is refused by name, and changes nothing
      const forged = `wk_${"A".repeat(48)}`;
      expect(
        await callError(later.client, "generate", { session_id: first.session_id, owner_key: forged, max_tokens: 1 }),
      ).toMatch(/owner_key is not a key this server issued.*\[owner_key_invalid\]/);
      expect(await callError(later.client, "create_session", { task: "x", owner_key: "guessable" })).toMatch(
        /owner_key_invalid/,
      );
      for (const s of [first, second, third])
        await call(later.client, "close_session", { session_id: s.session_id, owner_key: key });
      expect(await callError(later.client, "get_session", { session_id: first.session_id, owner_key: key })).toMatch(
        /session_not_found/,
      );
    } finally {
      await later.close();
    }
  });

  it("end with their connection when its client never sent their key back (a 2025-era client: nobody else can reach them)", async () => {
    const carol = await connectClient("http", server);
    const { session_id, owner_key } = await open(carol);
    await call(carol.client, "generate", { session_id, max_tokens: 1 });
    await endConnection(carol);
    const ended = performance.now();
    // closed with the connection, not 6 s later by idle expiry: its engine slot is free at once (the status page of a
    // token-less loopback server lists every session; asking with the key would claim it)
    await expect.poll(() => openSessions(), { timeout: 3_000, interval: 50 }).not.toContain(session_id);
    expect(performance.now() - ended).toBeLessThan(3_000);
    expect(owner_key).toMatch(/^wk_/);
  });

  it("close when nobody uses them for sessions.idleMinutes, not when their connection ends", async () => {
    const bob = await connectClient("sse", server);
    const { session_id, owner_key } = await open(bob);
    await call(bob.client, "get_session", { session_id, owner_key });
    await bob.close(); // a legacy SSE connection ends when its stream does
    const ended = performance.now();
    const other = await connectClient("http", server);
    try {
      const reach = () => call(other.client, "get_session", { session_id, owner_key });
      await expect(reach()).resolves.toMatchObject({ session_id });
      await expect
        .poll(
          () =>
            reach().then(
              () => "open",
              (err: Error) => err.message,
            ),
          { timeout: 20_000, interval: 500 },
        )
        .toMatch(/session_not_found/);
      // idle for 6 s (0.1 minutes), swept every 1.5 s
      expect(performance.now() - ended).toBeGreaterThan(5_000);
    } finally {
      await endConnection(other);
    }
  });

  it("on a 2026-07-28 client (no connection) are reached by their owner_key alone, from either revision", async () => {
    const modern = new Client2026(
      { name: "modern", version: "0" },
      { versionNegotiation: { mode: { pin: "2026-07-28" } } },
    );
    await modern.connect(new Transport2026(new URL(`${server.url}/mcp`)));
    const legacy = await connectClient("http", server);
    try {
      const modernCall = async (name: string, args: Record<string, unknown>) => {
        const result = await modern.callTool({ name, arguments: args });
        const text = (result.content as { text?: string }[]).map((c) => c.text).join("");
        return { error: result.isError ? text : undefined, value: result.structuredContent as Record<string, unknown> };
      };
      const { value } = await modernCall("create_session", { task: "Who wrote it?" });
      const { session_id, owner_key } = value as { session_id: string; owner_key: string };
      expect(owner_key).toMatch(/^wk_/);
      // no connection stands for the client: without its key a request owns nothing, and is told what to send
      expect((await modernCall("get_session", { session_id })).error).toMatch(
        /owner_key is required.*\[owner_key_invalid\]/,
      );
      expect((await modern.listResources()).resources.map((r) => r.uri)).not.toContain(
        `weact://sessions/${session_id}`,
      );
      expect((await modernCall("get_session", { session_id, owner_key })).value).toMatchObject({ session_id });
      // the same key from a 2025-11-25 connection, which has a key of its own
      expect(await callError(legacy.client, "get_session", { session_id })).toMatch(/session_not_found/);
      await call(legacy.client, "close_session", { session_id, owner_key });
      expect((await modernCall("get_session", { session_id, owner_key })).error).toMatch(/session_not_found/);
    } finally {
      await modern.close();
      await endConnection(legacy);
    }
  });
});
