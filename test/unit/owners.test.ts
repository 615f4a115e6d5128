import { describe, expect, it } from "vitest";
import { OwnerKeyError, Owners } from "../../src/mcp/owners.js";

const HTTP = { transport: "http" } as const;
const STDIO = { transport: "stdio" } as const;

describe("Owners", () => {
  it("a token names the owner whatever key comes with it; stdio is the one local client", () => {
    const owners = new Owners();
    const { key } = owners.forNew(HTTP);
    expect(owners.of({ ...HTTP, authInfo: { clientId: "carol" } }, key)).toBe("token:carol");
    expect(owners.of(STDIO)).toBe("stdio");
    expect(owners.forNew(STDIO)).toEqual({ owner: "stdio" });
  });

  it("a connection has one key of its own; a key sent back names its owner from anywhere, and no owner holds a key", () => {
    const owners = new Owners();
    const viaA = owners.forNew({ ...HTTP, sessionId: "conn-a" });
    expect(owners.forNew({ ...HTTP, sessionId: "conn-a" })).toEqual(viaA);
    expect(owners.of({ ...HTTP, sessionId: "conn-b" })).not.toBe(viaA.owner);
    expect(owners.of({ ...HTTP, sessionId: "conn-b" }, viaA.key)).toBe(viaA.owner);
    expect(owners.of(HTTP, viaA.key)).toBe(viaA.owner);
    expect(viaA.owner).not.toContain(viaA.key!.slice(3, 27));
  });

  it("a request over no connection without token or key owns nothing, and gets a fresh key for a new session", () => {
    const owners = new Owners();
    expect(owners.find(HTTP)).toBeUndefined();
    expect(() => owners.of(HTTP)).toThrow(/owner_key is required/);
    const a = owners.forNew(HTTP);
    const b = owners.forNew(HTTP);
    expect(a.key).not.toBe(b.key);
    expect(a.owner).not.toBe(b.owner);
  });

  it("refuses keys it did not issue: forged, truncated, another server's", () => {
    const owners = new Owners();
    const { key } = owners.forNew(HTTP);
    const other = new Owners().forNew(HTTP).key!;
    const flipped = key!.slice(0, -1) + (key!.endsWith("A") ? "B" : "A");
    for (const bad of [other, flipped, key!.slice(0, -4), `wk_${"A".repeat(48)}`, "guessable", ""]) {
      expect(() => owners.of(HTTP, bad)).toThrow(OwnerKeyError);
    }
  });

  it("a connection's own key is claimed once it is sent back while the connection is open, and forgotten when it ends", () => {
    const owners = new Owners();
    const kept = owners.forNew({ ...HTTP, sessionId: "kept" });
    const left = owners.forNew({ ...HTTP, sessionId: "left" });
    owners.connectionOpened("kept");
    owners.connectionOpened("left");
    owners.of({ ...HTTP, sessionId: "elsewhere" }, kept.key);
    expect(owners.connectionEnded("kept")).toEqual({ owner: kept.owner, claimed: true });
    expect(owners.connectionEnded("left")).toEqual({ owner: left.owner, claimed: false });
    // a key sent back after its connection ended claims nothing: nothing is tracked past the connection
    owners.of(HTTP, left.key);
    expect(owners.connectionEnded("left")).toEqual({ owner: left.owner, claimed: false });
  });
});
