import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "./files.js";
import { call, callError, connectClient, type Connected, type HttpServer } from "./server.js";

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";
const CAROL = "carol-token-0123456789abcdef";
const tokenFile = join(tempDir(), "tokens");
writeFileSync(tokenFile, `alice:${ALICE}\nbob:${BOB}\ncarol:${CAROL}\n`);

/** Short prompts: the first turn of each session evaluates them. */
const SHORT = { system: "Be brief.", tools: [] };
/** Uniform turns without calls: the demo model may neither stop early nor leave a call to answer. */
const TURN = { max_tokens: 8, token_bias: { "<tool_call>": -100, "<|im_end|>": -100, "<|endoftext|>": -100 } };

/**
 * Per-identity fair shares on a spawned server with three tokens, whichever engine serves it: `start` spawns one
 * with 4 session slots and the `sessions` section given. `batches`: the engine runs every session's call at once,
 * decoding them together (the local engine's decode rounds), rather than one model call at a time; then nobody's call
 * waits behind another's, and the checks say so.
 */
export function describeFairShares(
  engine: string,
  start: (tokenFile: string, sessions: Record<string, unknown>) => Promise<HttpServer>,
  { batches = false } = {},
): void {
  describe(`fair shares on ${engine} (a spawned server, three tokens)`, () => {
    let server: HttpServer;
    const clients: Connected[] = [];
    let bobSession: string | undefined;
    let aliceSessions: string[] = [];
    let carolSession: string | undefined;
    const as = async (token: string) => {
      const c = await connectClient("http", server, { authorization: `Bearer ${token}` });
      clients.push(c);
      return c.client;
    };
    beforeAll(async () => {
      // each client may hold 3 of the 4 slots and queue 2 model calls
      server = await start(tokenFile, { maxSlotsPerClient: 3, maxQueuedPerClient: 2, maxSessions: 4 });
    });
    afterAll(async () => {
      await Promise.all(clients.map((c) => c.close()));
      await server?.stop();
    });

    it(`keeps a slot for another client, serves it ${batches ? "beside" : "after at most one of"} a flooding client's turns, and names each limit`, async () => {
      const alice = await as(ALICE);
      const mine: string[] = [];
      let refusal = "";
      for (let i = 0; i < 6 && !refusal; i++) {
        try {
          mine.push(
            (await call<{ session_id: string }>(alice, "create_session", { task: `alice ${i}`, ...SHORT })).session_id,
          );
        } catch (err) {
          refusal = (err as Error).message;
        }
      }
      expect(mine).toHaveLength(3);
      aliceSessions = mine;
      expect(refusal).toMatch(/holds 3 of the engine's 4 session slots.*sessions\.maxSlotsPerClient/);

      // alice floods: every one of her sessions asks for turn after turn
      let stop = false;
      const done: number[] = [];
      const busy: string[] = [];
      const flood = mine.map(async (session_id) => {
        while (!stop) {
          try {
            // 64 tokens: an 8-token turn of hers could end, and her next one start, in the few milliseconds his
            // call took to reach the queue (measured on a fast machine: 2 of hers ended during his turn)
            await call(alice, "generate", { session_id, ...TURN, max_tokens: 64 });
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
      const bobStarted = performance.now();
      await call(bob, "generate", { session_id, ...TURN });
      const bobMs = performance.now() - bobStarted;
      const alicesMeanwhile = done.length - before;
      stop = true;
      await Promise.all(flood);
      console.log(`bob's turn: ${bobMs.toFixed(0)} ms, while ${alicesMeanwhile} of alice's ended`);
      // one model call at a time: after at most the one of hers running. Decoded together: his turn (his short prompt,
      // then a token a round) is decoded in the same rounds as hers, so each of her sessions ends at most the turn it
      // was in and one more meanwhile; behind her backlog it would be far more
      expect(alicesMeanwhile).toBeLessThanOrEqual(batches ? 2 * mine.length : 1);
      // her third session found her queue share full, and was told which setting that is
      expect(busy.length).toBeGreaterThan(0);
      for (const message of busy) expect(message).toMatch(/sessions\.maxQueuedPerClient/);
    });

    it("refuses a session past the server's maximum, naming the setting, and opens it once one closes", async () => {
      const carol = await as(CAROL);
      // alice holds 3 sessions and bob 1 from the test above: the server's maximum of 4
      expect(await callError(carol, "create_session", { task: "carol", ...SHORT })).toMatch(
        /maximum of 4 sessions \(sessions\.maxSessions\)/,
      );
      const bob = clients[1]!.client;
      expect(bobSession).toBeDefined();
      await call(bob, "close_session", { session_id: bobSession });
      carolSession = (await call<{ session_id: string }>(carol, "create_session", { task: "carol", ...SHORT }))
        .session_id;
      expect(carolSession).toMatch(/^s_/);
    });

    it(
      batches
        ? "a short call arriving while another client's long one decodes is decoded beside it, not queued: it ends first and reports no queue time to speak of"
        : "reports a call's whole wait as its queue time: a call behind another client's waits about that call's length",
      async () => {
        const [alice, , carol] = clients.map((c) => c.client);
        expect(carolSession).toBeDefined();
        const timed = (
          client: typeof alice,
          session_id: string,
          max_tokens: number,
          onprogress?: (p: { message?: string }) => void,
        ) => {
          const sent = performance.now();
          return call<{ timings: { queueMs: number; totalMs: number } }>(
            client!,
            "generate",
            { session_id, ...TURN, max_tokens },
            onprogress && { onprogress },
          ).then(({ timings }) => ({ sent, answered: performance.now(), timings }));
        };
        // the second arrives once the first decodes (one model call at a time): it waits for the rest of the first
        let decoding!: () => void;
        const firstDecodes = new Promise<void>((resolve) => (decoding = resolve));
        // 800 tokens: on a fast machine llama-server evaluates 200 too quickly to tell a queue time from 0
        const first = timed(alice, aliceSessions[0]!, 800, (p) => {
          if (p.message?.startsWith("decoding")) decoding();
        });
        await firstDecodes;
        const [long, behind] = await Promise.all([first, timed(carol, carolSession!, 4)]);
        if (batches) {
          console.log(
            `beside a ${long.timings.totalMs.toFixed(0)} ms call: a short one took ${(behind.answered - behind.sent).toFixed(0)} ms, queueMs ${behind.timings.queueMs.toFixed(0)}`,
          );
          expect(behind.answered).toBeLessThan(long.answered);
          expect(behind.timings.queueMs).toBeLessThan(Math.max(100, 0.25 * (long.answered - behind.sent)));
          return;
        }
        // the second waited from its arrival until the first was done
        const waited = long.answered - behind.sent;
        console.log(
          `queue time: first call ${long.timings.totalMs.toFixed(0)} ms of work; the call behind it waited ~${waited.toFixed(0)} ms and reports queueMs ${behind.timings.queueMs.toFixed(0)}`,
        );
        expect(waited).toBeGreaterThan(200);
        expect(Math.abs(behind.timings.queueMs - waited)).toBeLessThan(Math.max(100, 0.25 * waited));
      },
    );
  });
}
