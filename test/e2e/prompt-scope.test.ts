import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import {
  call,
  connectClient,
  startHttpServer,
  testConfig,
  type Connected,
  type HttpServer,
} from "../helpers/server.js";

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdefgh";

interface Loaded {
  switch: { shared_tokens: number; restored_tokens: number };
}

/**
 * Shared prompt prefixes on a team server: the server's own system prompt and function docs are shared by
 * every identity, a prompt a client wrote only within that client's identity (so no timing tells another
 * client what it contains). Background work is off so each figure comes from the switch itself.
 */
describe("prompt prefixes are shared within their scope only (HTTP, two identities)", () => {
  let server: HttpServer;
  let alice: Connected;
  let bob: Connected;
  beforeAll(async () => {
    const tokenFile = join(tempDir("weact-scope-"), "tokens");
    writeFileSync(tokenFile, `alice:${ALICE}\nbob:${BOB}\n`);
    server = await startHttpServer(["--token-file", tokenFile], testConfig({ cache: { background: false } }));
    alice = await connectClient("http", server, { Authorization: `Bearer ${ALICE}` });
    bob = await connectClient("http", server, { Authorization: `Bearer ${BOB}` });
  });
  afterAll(async () => {
    await alice?.close();
    await bob?.close();
    await server?.stop();
  });

  /** A session with `system` (the server's when undefined) loading `adapter`: the shared tokens its switch restored. */
  async function sharedOnLoad(client: Connected, adapter: string, system?: string): Promise<number> {
    const { session_id } = await call<{ session_id: string }>(client.client, "create_session", {
      task: "Which river flows through Paris?",
      ...(system ? { system } : {}),
    });
    try {
      const loaded = await call<Loaded>(client.client, "load_lora", { session_id, adapter });
      expect(loaded.switch.restored_tokens).toBeGreaterThanOrEqual(loaded.switch.shared_tokens);
      return loaded.switch.shared_tokens;
    } finally {
      await call(client.client, "close_session", { session_id });
    }
  }

  it("a client's own system prompt: shared by its next session, not by another identity's with the same text", async () => {
    const secret = "You are alice's research agent. Internal codename: heron-7.";
    expect(await sharedOnLoad(alice, "plan", secret)).toBe(0);
    expect(await sharedOnLoad(alice, "plan", secret)).toBeGreaterThan(100);
    expect(await sharedOnLoad(bob, "plan", secret)).toBe(0);
    expect(await sharedOnLoad(bob, "plan", secret)).toBeGreaterThan(100); // bob's own copy, in bob's scope
  });

  it("the server's own prompt is shared across identities", async () => {
    expect(await sharedOnLoad(alice, "search")).toBe(0);
    expect(await sharedOnLoad(bob, "search")).toBeGreaterThan(100);
  });
});
