import { describe, expect, it } from "vitest";
import { DecodeRounds, WorkLog, type DecodeGroup } from "../../src/engines/local/testing.js";

/** A group whose weights are applied by recording them (and failing when told to). */
function groups(applied: string[]) {
  return (context: number, weights: string, fail = false, sequence = 0): DecodeGroup => ({
    context,
    weights,
    sequence,
    apply: () => {
      applied.push(`${context}:${weights}`);
      return fail ? Promise.reject(new Error(`cannot apply ${weights}`)) : Promise.resolve(true);
    },
  });
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("decode rounds (one context and weight set at a time)", () => {
  it("decodes of one group share a round; another group waits for it to end, then gets the next round whole", async () => {
    const applied: string[] = [];
    const group = groups(applied);
    const rounds = new DecodeRounds(new WorkLog());
    const order: string[] = [];
    const a1 = await rounds.enter(group(0, "plan"));
    const a2 = await rounds.enter(group(0, "plan")); // joins: nobody else waits
    const b = rounds.enter(group(0, "write")).then((leave) => (order.push("write"), leave));
    const a3 = rounds.enter(group(0, "plan")).then((leave) => (order.push("plan again"), leave)); // behind write
    const b2 = rounds.enter(group(0, "write")).then((leave) => (order.push("write 2"), leave));
    await tick();
    expect(order).toEqual([]);
    a1();
    await tick();
    expect(order).toEqual([]); // a2 still decodes
    a2();
    await tick();
    // write's two decodes come in one round, before plan's third, though plan asked between them
    expect(order).toEqual(["write", "write 2"]);
    (await b)();
    (await b2)();
    await tick();
    expect(order).toEqual(["write", "write 2", "plan again"]);
    (await a3)();
    expect(applied).toEqual(["0:plan", "0:write", "0:plan"]);
    expect(rounds.stats).toEqual({ rounds: 3, decodes: 5, weightChanges: 3 });
  });

  it("a round lets its decodes through in sequence order (llama.cpp batches consecutive sequence ids in one piece)", async () => {
    const group = groups([]);
    const rounds = new DecodeRounds(new WorkLog());
    const order: number[] = [];
    const running = await rounds.enter(group(0, "base"));
    const waiting = [5, 1, 3].map((sequence) =>
      rounds.enter(group(1, "plan", false, sequence)).then((leave) => (order.push(sequence), leave)),
    );
    running();
    for (const leave of await Promise.all(waiting)) leave();
    expect(order).toEqual([1, 3, 5]);
  });

  it("a round whose weights cannot be applied refuses its decodes and hands the round on", async () => {
    const applied: string[] = [];
    const group = groups(applied);
    const rounds = new DecodeRounds(new WorkLog());
    const first = await rounds.enter(group(0, "base"));
    const failing = rounds.enter(group(1, "plan", true));
    const next = rounds.enter(group(1, "search"));
    first();
    await expect(failing).rejects.toThrow("cannot apply plan");
    const leave = await next;
    leave();
    expect(applied).toEqual(["0:base", "1:plan", "1:search"]);
  });

  it("an exclusive hold waits for the decodes in flight and lets none start until it is done", async () => {
    const group = groups([]);
    const rounds = new DecodeRounds(new WorkLog());
    const events: string[] = [];
    const decoding = await rounds.enter(group(0, "plan"));
    const exclusive = rounds.exclusive(async () => {
      events.push("exclusive");
      await tick();
      events.push("exclusive done");
    });
    const later = rounds.enter(group(0, "plan")).then((leave) => (events.push("decode"), leave));
    await tick();
    expect(events).toEqual([]);
    decoding();
    await exclusive;
    (await later)();
    expect(events).toEqual(["exclusive", "exclusive done", "decode"]);
  });

  it("records each decode's wait and run, marked as a caller's or as work ahead of time", async () => {
    const log = new WorkLog();
    const rounds = new DecodeRounds(log);
    const group = groups([]);
    (await rounds.enter(group(0, "plan"), true))();
    (await rounds.enter(group(1, "base")))();
    expect(log.list().map((h) => [h.context, h.background])).toEqual([
      [0, true],
      [1, false],
    ]);
    for (const h of log.list()) expect(h.queuedAt <= h.startedAt && h.startedAt <= h.endedAt).toBe(true);
  });
});
