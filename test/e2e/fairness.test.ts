import { describe, expect, it } from "vitest";
import { BusyError } from "../../src/sessions/errors.js";
import { WorkQueue } from "../../src/sessions/WorkQueue.js";
import { describeFairShares } from "../helpers/fairShares.js";
import { startHttpServer, testConfig } from "../helpers/server.js";

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
    const held = [
      queue.run("a", () => hold.opened),
      queue.run("a", () => hold.opened),
      queue.run("b", () => hold.opened),
    ];
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

// one context of 4 sequences: 4 session slots, every session's call decoded in the same rounds
describeFairShares(
  "one local engine",
  (tokenFile, sessions) =>
    startHttpServer(
      ["--token-file", tokenFile],
      testConfig({ model: { maxContexts: 1, sequencesPerContext: 4 }, sessions }),
    ),
  { batches: true },
);
