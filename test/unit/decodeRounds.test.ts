import { describe, expect, it } from "vitest";
import { AdapterVersion, WeightSet } from "../../src/engine/index.js";
import {
  DecodeRounds,
  decodesAlone,
  mayShareRound,
  WorkLog,
  type DecodeGroup,
  type RoundTarget,
} from "../../src/engines/local/localTesting.js";

/** A weight set named by one alias ("base": none). */
const weightSet = (name: string) =>
  WeightSet.of("ab".repeat(32), name === "base" ? [] : [AdapterVersion.of(name, "0", 1)]);

/**
 * Groups in contexts that apply weights by recording them (and fail to apply the sets a group was made failing with).
 */
function groups(applied: string[]) {
  const contexts = new Map<number, RoundTarget>();
  const failing = new Set<string>();
  const contextOf = (id: number): RoundTarget => {
    const made = contexts.get(id) ?? {
      id,
      apply: (weights: WeightSet) => {
        const name = weights.label ?? "base";
        applied.push(`${id}:${name}`);
        return failing.has(`${id}:${name}`) ? Promise.reject(new Error(`cannot apply ${name}`)) : Promise.resolve(true);
      },
    };
    contexts.set(id, made);
    return made;
  };
  return (context: number, weights: string, fail = false, sequence = 0, background = false): DecodeGroup => {
    if (fail) failing.add(`${context}:${weights}`);
    else failing.delete(`${context}:${weights}`);
    return { context: contextOf(context), weights: weightSet(weights), background, sequence };
  };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("decode rounds (one context and weight set at a time)", () => {
  it("decodes of one group share a round; another group waits for it to end, then gets the next round whole", async () => {
    const applied: string[] = [];
    const group = groups(applied);
    const rounds = new DecodeRounds(new WorkLog(), 512);
    const order: string[] = [];
    const a1 = await rounds.enter(group(0, "plan"), 1);
    const a2 = await rounds.enter(group(0, "plan"), 1); // joins: nobody else waits
    const b = rounds.enter(group(0, "write"), 1).then((leave) => (order.push("write"), leave));
    const a3 = rounds.enter(group(0, "plan"), 1).then((leave) => (order.push("plan again"), leave)); // behind write
    const b2 = rounds.enter(group(0, "write"), 1).then((leave) => (order.push("write 2"), leave));
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
    const rounds = new DecodeRounds(new WorkLog(), 512);
    const order: number[] = [];
    const running = await rounds.enter(group(0, "base"), 1);
    const waiting = [5, 1, 3].map((sequence) =>
      rounds.enter(group(1, "plan", false, sequence), 1).then((leave) => (order.push(sequence), leave)),
    );
    running();
    for (const leave of await Promise.all(waiting)) leave();
    expect(order).toEqual([1, 3, 5]);
  });

  it("batch-invariant (the default): every decode is a round of its own, in the order the decodes arrived", async () => {
    const group = groups([]);
    const rounds = new DecodeRounds(new WorkLog(), 512, decodesAlone);
    const order: string[] = [];
    const running = await rounds.enter(group(0, "base"), 1);
    const enter = (tokens: number, sequence: number) =>
      rounds
        .enter(group(0, "plan", false, sequence), tokens)
        .then((leave) => (order.push(`${tokens}:${sequence}`), leave));
    const waiting = [enter(1, 0), enter(40, 1), enter(1, 2)];
    running();
    for (const [i, expected] of [
      [0, ["1:0"]],
      [1, ["1:0", "40:1"]],
      [2, ["1:0", "40:1", "1:2"]],
    ] as const) {
      const leave = await waiting[i]!;
      await tick();
      expect(order).toEqual(expected); // nothing joined the round
      leave();
    }
    expect(rounds.stats).toMatchObject({ rounds: 4, decodes: 4 });
  });

  it("a round holds about one batch (the shortest decodes first, one past it at most); the rest waits behind the other groups", async () => {
    const group = groups([]);
    // model.batchInvariant false: prompt pieces share rounds
    const rounds = new DecodeRounds(new WorkLog(), 512, mayShareRound);
    const order: string[] = [];
    const running = await rounds.enter(group(0, "base"), 1);
    const enter = (weights: string, tokens: number, sequence: number) =>
      rounds
        .enter(group(0, weights, false, sequence), tokens)
        .then((leave) => (order.push(`${weights}:${sequence}`), leave));
    const plan = [enter("plan", 512, 0), enter("plan", 300, 1), enter("plan", 1, 2), enter("plan", 400, 3)];
    const write = enter("write", 1, 4);
    running();
    // 1 + 300 fit, 400 goes past the batch (the one allowed), 512 waits; let through in sequence order
    const first = await Promise.all([plan[1]!, plan[2]!, plan[3]!]);
    expect(order).toEqual(["plan:1", "plan:2", "plan:3"]);
    for (const leave of first) leave();
    (await write)();
    (await plan[0]!)();
    expect(order).toEqual(["plan:1", "plan:2", "plan:3", "write:4", "plan:0"]); // write's batch before plan's second
  });

  it("a round whose weights cannot be applied refuses its decodes and hands the round on", async () => {
    const applied: string[] = [];
    const group = groups(applied);
    const rounds = new DecodeRounds(new WorkLog(), 512);
    const first = await rounds.enter(group(0, "base"), 1);
    const failing = rounds.enter(group(1, "plan", true), 1);
    const next = rounds.enter(group(1, "search"), 1);
    first();
    await expect(failing).rejects.toThrow("cannot apply plan");
    const leave = await next;
    leave();
    expect(applied).toEqual(["0:base", "1:plan", "1:search"]);
  });

  it("an exclusive hold waits for the decodes in flight and lets none start until it is done", async () => {
    const group = groups([]);
    const rounds = new DecodeRounds(new WorkLog(), 512);
    const events: string[] = [];
    const decoding = await rounds.enter(group(0, "plan"), 1);
    const exclusive = rounds.exclusive(async () => {
      events.push("exclusive");
      await tick();
      events.push("exclusive done");
    });
    const later = rounds.enter(group(0, "plan"), 1).then((leave) => (events.push("decode"), leave));
    await tick();
    expect(events).toEqual([]);
    decoding();
    await exclusive;
    (await later)();
    expect(events).toEqual(["exclusive", "exclusive done", "decode"]);
  });

  it("records each decode's wait and run, marked as a caller's or as work ahead of time", async () => {
    const log = new WorkLog();
    const rounds = new DecodeRounds(log, 512);
    const group = groups([]);
    (await rounds.enter(group(0, "plan", false, 0, true), 1))();
    (await rounds.enter(group(1, "base"), 1))();
    expect(log.list().map((h) => [h.context, h.background])).toEqual([
      [0, true],
      [1, false],
    ]);
    for (const h of log.list()) expect(h.queuedAt <= h.startedAt && h.startedAt <= h.endedAt).toBe(true);
  });
});
