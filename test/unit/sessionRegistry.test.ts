import { afterEach, describe, expect, it, vi } from "vitest";
import { Mutex } from "../../src/mutex.js";
import { createLogger } from "../../src/log.js";
import { LimitError, SessionNotFoundError } from "../../src/sessions/errors.js";
import type { Session } from "../../src/sessions/Session.js";
import { SessionRegistry, type SessionsConfig } from "../../src/sessions/SessionRegistry.js";

// the registry's own logic: a session here is only what the registry reads of one (id, owner, lock, engine.close)
const config = (over: Partial<SessionsConfig> = {}): SessionsConfig =>
  ({
    keepToolResults: 5,
    idleMinutes: 30,
    maxSessions: 4,
    maxSessionsPerClient: 3,
    maxQueuedGenerations: 8,
    maxQueuedPerClient: 4,
    defaultMaxTokens: 16,
    ...over,
  }) as SessionsConfig;
let n = 0;
const fake = (owner: string, closed: string[] = []) => {
  const id = `s_${++n}`;
  return {
    id,
    owner,
    lock: new Mutex(),
    lastActiveAt: Date.now(),
    engine: { close: async () => void closed.push(id) },
  } as unknown as Session;
};
const registries: SessionRegistry[] = [];
const registry = (over: Partial<SessionsConfig> = {}, slots = 8) => {
  const r = new SessionRegistry(config(over), slots, createLogger("silent"));
  registries.push(r);
  return r;
};
afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(registries.splice(0).map((r) => r.dispose()));
});
const opening = (r: SessionRegistry, owner: string, closed?: string[]) => {
  let finish!: () => void;
  const added = r.add(owner, () => new Promise<Session>((resolve) => (finish = () => resolve(fake(owner, closed)))));
  return { added, finish: () => (finish(), added) };
};

describe("the session registry", () => {
  it("someone else's session looks exactly like a missing one", async () => {
    const r = registry();
    const s = await r.add("alice", async () => fake("alice"));
    expect(r.get("alice", s.id)).toBe(s);
    expect(() => r.get("bob", s.id)).toThrow(SessionNotFoundError);
    expect(() => r.get("bob", s.id)).toThrow(new SessionNotFoundError(s.id).message);
    expect(() => r.get("alice", "s_nope")).toThrow(new SessionNotFoundError("s_nope").message);
    expect(r.list("bob")).toEqual([]);
  });

  it("refuses past the client's limit, the server's limit and the client's share of the engine's slots", async () => {
    const perClient = registry({ maxSessionsPerClient: 2 });
    for (let i = 0; i < 2; i++) await perClient.add("alice", async () => fake("alice"));
    expect(() => perClient.admit("alice")).toThrow(/maximum of 2 sessions \(sessions.maxSessionsPerClient\)/);
    expect(() => perClient.admit("bob")).not.toThrow();

    const server = registry({ maxSessions: 2 });
    await server.add("alice", async () => fake("alice"));
    await server.add("bob", async () => fake("bob"));
    expect(() => server.admit("carol")).toThrow(/maximum of 2 sessions \(sessions.maxSessions\)/);

    // default share: one slot below the engine's total
    const slots = registry({}, 3);
    for (let i = 0; i < 2; i++) await slots.add("alice", async () => fake("alice"));
    expect(() => slots.admit("alice")).toThrow(
      /holds 2 of the engine's 3 session slots, its share \(sessions.maxSlotsPerClient = 2\)/,
    );
    expect(() => registry({}, 1).admit("alice")).not.toThrow();
  });

  it("a session being opened counts against the limits until it is added or fails", async () => {
    const r = registry({ maxSessionsPerClient: 1 });
    let finish!: () => void;
    const adding = r.add("alice", () => new Promise<Session>((resolve) => (finish = () => resolve(fake("alice")))));
    expect(() => r.admit("alice")).toThrow(LimitError);
    finish();
    await adding;
    expect(() => r.admit("alice")).toThrow(LimitError);

    const failing = registry({ maxSessionsPerClient: 1 });
    await expect(failing.add("alice", async () => Promise.reject(new Error("no slot")))).rejects.toThrow("no slot");
    expect(() => failing.admit("alice")).not.toThrow();
  });

  it("close frees the session's engine side and its place; closeOwnedBy closes only the owner's", async () => {
    const closed: string[] = [];
    const r = registry({ maxSessionsPerClient: 1 });
    const a = await r.add("alice", async () => fake("alice", closed));
    const b = await r.add("bob", async () => fake("bob", closed));
    await r.close("alice", a.id);
    expect(closed).toEqual([a.id]);
    expect(() => r.get("alice", a.id)).toThrow(SessionNotFoundError);
    expect(() => r.admit("alice")).not.toThrow();
    await expect(r.close("alice", b.id)).rejects.toThrow(SessionNotFoundError);
    await r.closeOwnedBy("bob");
    expect(closed).toEqual([a.id, b.id]);
    expect(r.all()).toEqual([]);
  });

  it("sessions being opened by any client count against the server's limit, each until its own open ends", async () => {
    const r = registry({ maxSessions: 2, maxSessionsPerClient: 2 });
    const first = opening(r, "alice");
    const second = opening(r, "bob");
    expect(() => r.admit("carol")).toThrow(/sessions.maxSessions/);
    await first.finish();
    expect(() => r.admit("carol")).toThrow(/sessions.maxSessions/);
    expect(r.all()).toHaveLength(1);
    await second.finish();
    expect(
      r
        .all()
        .map((s) => s.owner)
        .sort(),
    ).toEqual(["alice", "bob"]);

    // one client's two opens: the one still opening counts after the other ended
    const mine = registry({ maxSessionsPerClient: 2 });
    const a = opening(mine, "alice");
    const b = opening(mine, "alice");
    await a.finish();
    expect(() => mine.admit("alice")).toThrow(/maximum of 2 sessions/);
    await b.finish();
    expect(() => mine.admit("alice")).toThrow(/maximum of 2 sessions/);
  });

  it("dispose closes every session", async () => {
    const closed: string[] = [];
    const r = registry();
    const ids = [
      (await r.add("alice", async () => fake("alice", closed))).id,
      (await r.add("bob", async () => fake("bob", closed))).id,
    ];
    await r.dispose();
    expect(closed.sort()).toEqual(ids.sort());
    expect(r.all()).toEqual([]);
  });

  it("closes sessions idle past sessions.idleMinutes at the next sweep, never one that is busy", async () => {
    vi.useFakeTimers();
    const closed: string[] = [];
    const r = registry({ idleMinutes: 8 }); // swept every 2 minutes
    // the busy one first: a sweep that waited on it would never reach the idle one
    const busy = await r.add("alice", async () => fake("alice", closed));
    const idle = await r.add("alice", async () => fake("alice", closed));
    let release!: () => void;
    void busy.lock.run(() => new Promise<void>((resolve) => (release = resolve)));
    await vi.advanceTimersByTimeAsync(7 * 60_000);
    const fresh = await r.add("bob", async () => fake("bob", closed));
    await vi.advanceTimersByTimeAsync(60_000); // nothing has idled 8 minutes at the 8-minute sweep
    expect(closed).toEqual([]);
    await vi.advanceTimersByTimeAsync(2 * 60_000);
    expect(closed).toEqual([idle.id]);
    expect(r.all()).toEqual([busy, fresh]);
    release();
  });
});
