import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BusyError } from "../src/sessions/errors.js";
import { WorkQueue } from "../src/sessions/WorkQueue.js";
import { tempDir } from "./helpers/files.js";
import { call, callError, connectClient, startHttpServer, testConfig, type Connected, type HttpServer } from "./helpers/server.js";

describe("WorkQueue (the scheduling logic alone)", () => {
  const gate = () => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    return { open, opened };
  };

  it("lets through the client served least recently: one client's backlog delays another by the running call only", async () => {
    const queue = new WorkQueue({ maxPending: 100, maxPendingPerClient: 100, concurrency: 1 });
    const order: string[] = [];
    const gates = new Map<string, ReturnType<typeof gate>>();
    const job = (client: string, name: string) => {
      const g = gate();
      gates.set(name, g);
      return queue.run(client, async () => {
        order.push(name);
        await g.opened;
      });
    };
    const all = [job("a", "a1"), job("a", "a2"), job("a", "a3"), job("a", "a4")];
    await Promise.resolve();
    all.push(job("b", "b1"), job("b", "b2"), job("c", "c1"));
    for (const name of ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]) {
      await expect.poll(() => order.at(-1)).toBe(name);
      gates.get(name)!.open();
    }
    await Promise.all(all);
    expect(order).toEqual(["a1", "b1", "c1", "a2", "b2", "a3", "a4"]);
  });

  it("refuses work past the per-client and the total bounds at once, naming the setting", async () => {
    const queue = new WorkQueue({ maxPending: 3, maxPendingPerClient: 2, concurrency: 1 });
    const hold = gate();
    const held = [queue.run("a", () => hold.opened), queue.run("a", () => hold.opened), queue.run("b", () => hold.opened)];
    let started = performance.now();
    const perClient = await queue.run("a", async () => "ran").catch((e: Error) => e);
    expect(performance.now() - started).toBeLessThan(50);
    expect(perClient).toBeInstanceOf(BusyError);
    expect((perClient as Error).message).toMatch(/sessions\.maxQueuedPerClient/);
    started = performance.now();
    const total = await queue.run("c", async () => "ran").catch((e: Error) => e);
    expect(performance.now() - started).toBeLessThan(50);
    expect((total as Error).message).toMatch(/sessions\.maxQueuedGenerations/);
    hold.open();
    await Promise.all(held);
    expect(await queue.run("c", async () => "ran")).toBe("ran");
  });
});

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";
const CAROL = "carol-token-0123456789abcdef";
const tokenFile = join(tempDir(), "tokens");
writeFileSync(tokenFile, `alice:${ALICE}\nbob:${BOB}\ncarol:${CAROL}\n`);

/** Short prompts: the first turn of each session evaluates them. */
const SHORT = { system: "Be brief.", tools: [] };
/** Uniform turns without calls: the demo model may neither stop early nor leave a call to answer. */
const TURN = { max_tokens: 8, token_bias: { "<tool_call>": -100, "<|im_end|>": -100, "<|endoftext|>": -100 } };

describe("fair shares on one engine (a spawned server, three tokens)", () => {
  let server: HttpServer;
  const clients: Connected[] = [];
  let bobSession: string | undefined;
  const as = async (token: string) => {
    const c = await connectClient("http", server, { authorization: `Bearer ${token}` });
    clients.push(c);
    return c.client;
  };
  beforeAll(async () => {
    // one context of 4 sequences: 4 session slots; each client may hold 3 and queue 2 model calls
    const config = testConfig({ model: { maxContexts: 1, sequencesPerContext: 4 }, sessions: { maxSlotsPerClient: 3, maxQueuedPerClient: 2, maxSessions: 4 } });
    server = await startHttpServer(["--token-file", tokenFile], config);
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await server?.stop();
  });

  it("keeps a slot for another client, serves it after at most one of a flooding client's turns, and names each limit", async () => {
    const alice = await as(ALICE);
    const mine: string[] = [];
    let refusal = "";
    for (let i = 0; i < 6 && !refusal; i++) {
      try {
        mine.push((await call<{ session_id: string }>(alice, "create_session", { task: `alice ${i}`, ...SHORT })).session_id);
      } catch (err) {
        refusal = (err as Error).message;
      }
    }
    expect(mine).toHaveLength(3);
    expect(refusal).toMatch(/holds 3 of the engine's 4 session slots.*sessions\.maxSlotsPerClient/);

    // alice floods: every one of her sessions asks for turn after turn
    let stop = false;
    const done: number[] = [];
    const busy: string[] = [];
    const flood = mine.map(async (session_id) => {
      while (!stop) {
        try {
          await call(alice, "generate", { session_id, ...TURN });
          done.push(performance.now());
        } catch (err) {
          busy.push((err as Error).message);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }
    });
    const bob = await as(BOB);
    const { session_id } = await call<{ session_id: string }>(bob, "create_session", { task: "bob", ...SHORT });
    bobSession = session_id;
    await expect.poll(() => done.length, { timeout: 30_000 }).toBeGreaterThanOrEqual(3);
    // right after one of alice's turns ended: another of hers runs now and one more waits
    const seen = done.length;
    await expect.poll(() => done.length, { timeout: 30_000, interval: 1 }).toBeGreaterThan(seen);
    const before = done.length;
    await call(bob, "generate", { session_id, ...TURN });
    const alicesMeanwhile = done.length - before;
    stop = true;
    await Promise.all(flood);
    expect(alicesMeanwhile).toBeLessThanOrEqual(1);
    // her third session found her queue share full, and was told which setting that is
    expect(busy.length).toBeGreaterThan(0);
    for (const message of busy) expect(message).toMatch(/sessions\.maxQueuedPerClient/);
  });

  it("refuses a session past the server's maximum, naming the setting, and opens it once one closes", async () => {
    const carol = await as(CAROL);
    // alice holds 3 sessions and bob 1 from the test above: the server's maximum of 4
    expect(await callError(carol, "create_session", { task: "carol", ...SHORT })).toMatch(/maximum of 4 sessions \(sessions\.maxSessions\)/);
    const bob = clients[1]!.client;
    expect(bobSession).toBeDefined();
    await call(bob, "close_session", { session_id: bobSession });
    expect((await call<{ session_id: string }>(carol, "create_session", { task: "carol", ...SHORT })).session_id).toMatch(/^s_/);
  });
});
