import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import { inCi, jailTestable } from "../helpers/host.js";

/**
 * The rule the isolation tests follow (test/e2e/runCode, shared-server, tools, http-hardening): where bwrap is missing
 * a local run skips the jail's tests, but a CI run fails them, so a CI machine without bubblewrap cannot pass.
 */
describe("the jail's tests without bwrap", () => {
  const empty = tempDir("weact-bin-");
  const withBwrap = tempDir("weact-bin-");
  writeFileSync(join(withBwrap, "bwrap"), "#!/bin/sh\n");
  chmodSync(join(withBwrap, "bwrap"), 0o755);

  it("fail in CI, skip locally, and run wherever bwrap is on PATH", () => {
    expect(() => jailTestable({ PATH: empty, CI: "true" })).toThrow(
      /CI=true but bwrap is not on PATH: in CI the isolation tests must run the bubblewrap jail, not skip it; install bubblewrap/,
    );
    expect(() => jailTestable({ PATH: empty, CI: "1" })).toThrow(/bwrap is not on PATH/);
    expect(jailTestable({ PATH: empty })).toBe(false);
    expect(jailTestable({ PATH: empty, CI: "false" })).toBe(false);
    expect(jailTestable({ PATH: withBwrap, CI: "true" })).toBe(true);
    expect(jailTestable({ PATH: withBwrap })).toBe(true);
    expect([inCi({ CI: "true" }), inCi({ CI: "0" }), inCi({ CI: "" }), inCi({})]).toEqual([true, false, false, false]);
  });
});
