import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnHttpServer } from "../../testkit/mcpClient.js";
import type { LocalEngine } from "../../src/engines/local/index.js";
import { referenceNextTokenLogProbs } from "../../src/engines/local/localTesting.js";
import { DEMO_BATCH_SPLIT_TOLERANCE, demoEngine, maxAbsDiff } from "../helpers/engine.js";
import { tempDir, tempLibrary } from "../helpers/files.js";
import { call, connectClient, testConfig, type Connected, type HttpServer } from "../helpers/server.js";

/*
 * Issue #52: an admin who can write in the library folder flips a file between a valid GGUF and a symlink to a file
 * outside it while register_adapter runs. The folder check, the hash and llama.cpp's load must all see the same bytes:
 * no call may read the outside file, every registration must be named by the bytes that were loaded.
 */

const ADMIN = "admin-token-0123456789abcdef";
const USER = "carol-token-0123456789abcdef";
/** What the outside file holds: a marker no answer may ever show, starting with bytes of its own ("sEcR"). */
const SECRET = `sEcRet-weact-52-${process.pid}-the-bytes-no-caller-may-see\n`;
const SECRET_MAGIC = `0x${Buffer.from(SECRET).readUInt32LE(0).toString(16)}`;
const RACE_CALLS = 160;
const RACE_MS = 15_000;

/**
 * Flips `lib/race.gguf` between a copy of the valid adapter and a symlink to the secret (each flip one rename, as an
 * attacker would), and `lib/sub` between a folder holding the valid adapter and a symlink to the secret's folder.
 */
const RACER = `
const { copyFileSync, renameSync, rmSync, symlinkSync } = require("node:fs");
const [valid, secret, secretDir, lib] = process.argv.slice(1);
const target = lib + "/race.gguf";
const sub = lib + "/sub";
const parked = lib + "/sub-parked";
for (let i = 0; ; i++) {
  const tmp = target + ".flip";
  try {
    rmSync(tmp, { force: true });
    if (i % 2) symlinkSync(secret, tmp);
    else copyFileSync(valid, tmp);
    renameSync(tmp, target);
    if (i % 4 === 1) {
      renameSync(sub, parked);
      symlinkSync(secretDir, sub);
    } else if (i % 4 === 3) {
      rmSync(sub);
      renameSync(parked, sub);
    }
  } catch {}
}
`;

const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");
/** The names of errno codes, as Node prints them: none may reach a caller. */
const RAW_ERRNO = /\b(E[A-Z]{3,}|errno|syscall)\b/;

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );
}

let server: HttpServer;
let admin: Connected;
/** An independent engine in this process, holding the valid file: what its weights compute. */
let reference: LocalEngine;
const TMPDIR = tempDir("weact-tmp-");
const { dir: lib, manifest, file } = tempLibrary();
const outside = tempDir("weact-outside-");
const secret = join(outside, "race.gguf");
const valid = join(lib, "valid-source.gguf");
let racer: ChildProcess | undefined;
/** The server user's folder of adapter copies, in the server's own temporary folder. */
const copiesRoot = join(TMPDIR, `weact-adapter-copies-${process.getuid!()}`);
/** The aliases the race registered. */
let raced: string[] = [];

beforeAll(async () => {
  const dir = tempDir("weact-team-");
  const tokenFile = join(dir, "tokens");
  const adminTokenFile = join(dir, "admin-tokens");
  writeFileSync(tokenFile, `carol:${USER}\n`);
  writeFileSync(adminTokenFile, `root:${ADMIN}\n`);
  writeFileSync(secret, SECRET.repeat(64));
  copyFileSync(file("code"), valid);
  copyFileSync(valid, join(lib, "race.gguf"));
  mkdirSync(join(lib, "sub"));
  copyFileSync(valid, join(lib, "sub", "race.gguf"));
  // the log-prob check compares with a fresh context evaluating the prompt in one decode: no work ahead of time, no
  // shared prefixes (as in e2e/library)
  const config = testConfig({
    adapters: { manifest },
    server: { adminTokenFile },
    cache: { background: false, sharedPrefixes: false },
  });
  [server, reference] = await Promise.all([
    spawnHttpServer(["--config", config, "--token-file", tokenFile], { TMPDIR }),
    demoEngine({ adapters: [] }),
  ]);
  await reference.addAdapter({ alias: "valid", filePath: valid, scale: 1 });
  admin = await connectClient("http", server, { authorization: `Bearer ${ADMIN}` });
});
afterAll(async () => {
  racer?.kill("SIGKILL");
  await admin?.close().catch(() => undefined);
  await server?.stop();
  await reference?.dispose();
});

describe("register_adapter while the file is flipped to a symlink out of the folder (issue #52)", () => {
  it("never reads the outside file, names every registration by the bytes it loaded, and refuses with coded errors", async () => {
    const validSha = sha256(readFileSync(valid));
    racer = spawn(process.execPath, ["-e", RACER, valid, secret, outside, lib], { stdio: "ignore" });
    const registered: { alias: string; sha256: string; text: string }[] = [];
    const refused: string[] = [];
    const started = Date.now();
    for (let i = 0; i < RACE_CALLS && Date.now() - started < RACE_MS; i++) {
      const alias = `race${i}`;
      const result = (await admin.client.callTool({
        name: "register_adapter",
        arguments: { alias, file: i % 3 === 2 ? "sub/race.gguf" : "race.gguf", description: "a raced file" },
      })) as { isError?: boolean; content: { text: string }[]; structuredContent?: { registered: { sha256: string } } };
      const text = result.content.map((c) => c.text).join("\n");
      if (result.isError) refused.push(text);
      else registered.push({ alias, sha256: result.structuredContent!.registered.sha256, text });
    }
    racer.kill("SIGKILL");
    const listing = JSON.stringify(await call(admin.client, "list_adapters"));
    const listed = (JSON.parse(listing) as { adapters: { alias: string; sha256: string }[] }).adapters;
    const answers = [...refused, ...registered.map((r) => r.text), listing, server.stderr()];
    const byCode = new Map(refused.map((t) => [/\[([a-z_]+)\]$/.exec(t)?.[1] ?? "(none)", t]));
    console.log(
      `${registered.length + refused.length} register_adapter calls under the race in ${Date.now() - started} ms: ${registered.length} registered, ${refused.length} refused, e.g.:\n${[...byCode.values()].join("\n")}`,
    );
    // every way the issue saw the race, counted together so a failure shows them all
    expect({
      leakingTheSecret: answers.filter((t) => t.includes("sEcR") || t.includes(SECRET_MAGIC)).length,
      // only valid GGUFs are ever inside the folder: a file found not to be one was read from outside it
      readOutside: refused.filter((t) => t.includes("[adapter_not_gguf]")).length,
      rawErrno: refused.filter((t) => RAW_ERRNO.test(t)).length,
      // a clear error with its stable code, naming the field to fix
      uncoded: refused.filter((t) => !/^file: .*\[adapter_[a-z_]+\]$/s.test(t)).length,
      namedByOtherBytes: registered.filter((r) => r.sha256 !== validSha).length,
      listedByOtherBytes: listed.filter((a) => a.alias.startsWith("race") && a.sha256 !== validSha).length,
    }).toEqual({
      leakingTheSecret: 0,
      readOutside: 0,
      rawErrno: 0,
      uncoded: 0,
      namedByOtherBytes: 0,
      listedByOtherBytes: 0,
    });
    // the race ran both ways: some calls got the valid file, some were refused
    expect(registered.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);

    // what llama.cpp loaded is the server's own copy of those bytes, named by their hash; nothing of the secret
    const copies = filesUnder(copiesRoot);
    for (const copy of copies) {
      const bytes = readFileSync(copy);
      expect(bytes.toString("latin1")).not.toContain("sEcR");
      expect(basename(dirname(copy))).toBe(sha256(bytes));
      expect(statSync(copy).mode & 0o077).toBe(0);
    }
    // one copy per content: the raced registrations share the valid file's, beside the library's own adapters
    expect(copies.map((c) => basename(dirname(c))).sort()).toEqual([...new Set(listed.map((a) => a.sha256))].sort());
    raced = registered.map((r) => r.alias);

    // and the weights a raced alias computes with are the valid file's: its next-token log-prob is what an independent
    // reference computes from the valid file for the same prompt, and far from what the base model alone gives
    for (const alias of [registered[0]!.alias, registered.at(-1)!.alias]) {
      const { session_id } = await call<{ session_id: string }>(admin.client, "create_session", {
        task: "compute 6*7",
      });
      await call(admin.client, "load_lora", { session_id, adapter: alias });
      const { prompt_tokens } = await call<{ prompt_tokens: number[] }>(admin.client, "get_session", {
        session_id,
        include_prompt_tokens: true,
      });
      const { logprobs } = await call<{ logprobs: { token: number; logprob: number }[] }>(admin.client, "generate", {
        session_id,
        max_tokens: 2,
        top_logprobs: 1,
      });
      const want = await referenceNextTokenLogProbs(reference, "valid", prompt_tokens);
      expect(Math.abs(logprobs[0]!.logprob - want.get(logprobs[0]!.token)!)).toBeLessThanOrEqual(
        DEMO_BATCH_SPLIT_TOLERANCE,
      );
      expect(maxAbsDiff(want, await referenceNextTokenLogProbs(reference, null, prompt_tokens))).toBeGreaterThan(0.1);
      await call(admin.client, "close_session", { session_id });
    }
  }, 60_000);

  it("removes a copy once no version uses it, and the server's copies when it stops", async () => {
    const validSha = sha256(readFileSync(valid));
    const copied = () => filesUnder(copiesRoot).map((c) => basename(dirname(c)));
    expect(copied()).toContain(validSha);
    for (const alias of raced) await call(admin.client, "unregister_adapter", { alias });
    expect(copied()).not.toContain(validSha);
    expect(copied()).toHaveLength(3);
    await server.stop();
    expect(copied()).toEqual([]);
  });
});
