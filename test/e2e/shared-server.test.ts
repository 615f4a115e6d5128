import { execFileSync, spawn } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client as Client2026, StreamableHTTPClientTransport as Transport2026 } from "@modelcontextprotocol/client";
import { GgufFormatError, readGgufHeader } from "../../src/gguf/index.js";
import { MAIN, spawnHttpServer } from "../../testkit/mcpClient.js";
import {
  DEFAULT_RUN_CODE_LIMITS,
  detectIsolation,
  hidingPaths,
  runCode,
} from "../../src/externalTools/runCode/index.js";
import { tempDir, tempLibrary, writeLoraVariant, writeZeroLora } from "../helpers/files.js";
import { bwrapOnPath, jailTestable, NO_BWRAP } from "../helpers/host.js";
import { call, callError, connectClient, testConfig, type Connected, type HttpServer } from "../helpers/server.js";

const USER = "carol-token-0123456789abcdef";
const ADMIN = "admin-token-0123456789abcdef";

/** A team server's private files: tokens, an admin token, its config, its adapter library and its traces. */
function teamServerFiles(runCode: Record<string, unknown> = {}) {
  const dir = tempDir("weact-team-");
  const tokenFile = join(dir, "tokens");
  const adminTokenFile = join(dir, "admin-tokens");
  writeFileSync(tokenFile, `carol:${USER}\n`);
  writeFileSync(adminTokenFile, `root:${ADMIN}\n`);
  const { dir: adapterDir, manifest } = tempLibrary();
  const traceDir = join(dir, "traces");
  mkdirSync(traceDir);
  writeFileSync(
    join(traceDir, "t_someoneelse01.jsonl"),
    `${JSON.stringify({ owner: "token:dave", type: "run", task: "dave's private task" })}\n`,
  );
  const config = testConfig({
    adapters: { manifest },
    harness: { traceDir },
    server: { adminTokenFile },
    tools: { runCode },
  });
  return {
    config,
    tokenFile,
    adminTokenFile,
    manifest,
    adapterDir,
    traceDir,
    args: ["--config", config, "--token-file", tokenFile],
  };
}

/** Each step of the escalation chain the issue found, as a snippet would try it; prints what each step got. */
const ESCALATION = String.raw`
import json, os, socket, sys
P = json.loads(sys.stdin.read())
steps = {}
def attempt(name, fn):
    try:
        got = fn()
        steps[name] = "succeeded: " + repr(got)[:300]
    except Exception as error:
        steps[name] = "failed: " + type(error).__name__
attempt("read the parent's command line", lambda: open("/proc/%d/cmdline" % os.getppid(), "rb").read() or 1/0)
attempt("read the server's command line", lambda: open("/proc/%d/cmdline" % P["serverPid"], "rb").read())
def find_server():
    found = [p for p in os.listdir("/proc") if p.isdigit() and b"main.js" in open("/proc/%s/cmdline" % p, "rb").read()]
    return found or 1/0
attempt("find the server among the processes", find_server)
attempt("open the config", lambda: open(P["config"]).read())
attempt("read the token file", lambda: open(P["tokenFile"]).read())
attempt("read the admin token file", lambda: open(P["adminTokenFile"]).read())
attempt("list the traces", lambda: os.listdir(P["traceDir"]))
attempt("connect to the server's port", lambda: socket.create_connection(("127.0.0.1", P["port"]), timeout=2))
def write_manifest():
    with open(P["manifest"], "w") as f:
        f.write('{"adapters": []}')
attempt("write the manifest", write_manifest)
def leave_a_process():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", P["marker"]], {})
        os._exit(0)
    os.wait()
    return "forked"
attempt("leave a process behind", leave_a_process)
print(json.dumps(steps))
`;

const fifoIn = (dir: string, name: string) => {
  const path = join(dir, name);
  execFileSync("mkfifo", [path]);
  return path;
};

/** Host pids whose command line carries `marker`. */
const processesWith = (marker: string) =>
  readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8").includes(marker);
      } catch {
        return false;
      }
    });

interface Listing {
  withdrawn_tools: { name: string; reason: string }[];
}

/** One team server for the escalation chain, the admin gate and the FIFO: its adapter folder holds a FIFO. */
const files = teamServerFiles();
const fifo = fifoIn(files.adapterDir, "fifo.gguf");
symlinkSync(fifo, join(files.adapterDir, "link.gguf"));
let server: HttpServer;
beforeAll(async () => {
  server = await spawnHttpServer(files.args);
});
afterAll(async () => server?.stop());

describe("run_code on a shared server (HTTP with tokens)", () => {
  it("is offered only inside a jail, and the issue's escalation chain fails at every step from inside it", async ({
    skip,
  }) => {
    const carol = await connectClient("http", server, { authorization: `Bearer ${USER}` });
    try {
      const tools = (await carol.client.listTools()).tools.map((t) => t.name);
      if (!jailTestable()) {
        expect(tools).not.toContain("run_code");
        return skip(NO_BWRAP);
      }
      expect(tools).toContain("run_code");
      const manifestBefore = readFileSync(files.manifest, "utf8");
      const marker = `weact-escape-${process.pid}-${Date.now()}`;
      const params = { serverPid: server.process.pid, port: Number(new URL(server.url).port), marker, ...files };
      const ran = await call<{ stdout: string; stderr: string; isolation: string }>(carol.client, "run_code", {
        language: "python",
        code: ESCALATION,
        stdin: JSON.stringify(params),
      });
      expect(ran.isolation).toBe("bubblewrap");
      const steps = JSON.parse(ran.stdout) as Record<string, string>;
      const { ["leave a process behind"]: forked, ...rest } = steps;
      expect(Object.keys(rest)).toHaveLength(9);
      for (const [step, outcome] of Object.entries(rest)) expect(outcome, step).toMatch(/^failed/);
      // the fork itself is allowed; what it started must not outlive the call
      expect(forked).toMatch(/forked|failed/);
      expect(processesWith(marker)).toEqual([]);
      expect(readFileSync(files.manifest, "utf8")).toBe(manifestBefore);
      // and the server still serves
      expect((await carol.client.listTools()).tools.length).toBeGreaterThan(0);
    } finally {
      await carol.close();
    }
  });
});

/** A PATH with what run_code needs (prlimit, setpriv, python3) but no bwrap: real start-up detection finds no jail. */
function pathWithoutBwrap(): string {
  const bin = tempDir("weact-bin-");
  const python = execFileSync("python3", ["-c", "import os, sys; print(os.path.realpath(sys.executable))"], {
    encoding: "utf8",
  }).trim();
  symlinkSync(python, join(bin, "python3"));
  for (const name of ["prlimit", "setpriv"]) {
    const found = execFileSync("sh", ["-c", `command -v ${name} || true`], { encoding: "utf8" }).trim();
    if (found) symlinkSync(realpathSync(found), join(bin, name));
  }
  expect(bwrapOnPath(bin)).toBe(false);
  return bin;
}

describe("run_code withdrawn from a shared server without a jail", () => {
  const PATH = pathWithoutBwrap();
  const noJail = teamServerFiles();
  const optedIn = teamServerFiles({ unsafeUnjailedOnSharedServer: true });
  let withdrawn: HttpServer;
  let offered: HttpServer;
  beforeAll(async () => {
    [withdrawn, offered] = await Promise.all([
      spawnHttpServer(noJail.args, { PATH }),
      spawnHttpServer(optedIn.args, { PATH }),
    ]);
  });
  afterAll(async () => Promise.all([withdrawn?.stop(), offered?.stop()]));

  it("is not offered, and the log, list_adapters and the tool list say why", async () => {
    const carol = await connectClient("http", withdrawn, { authorization: `Bearer ${USER}` });
    try {
      const { tools } = await carol.client.listTools();
      expect(tools.map((t) => t.name)).not.toContain("run_code");
      expect(tools.find((t) => t.name === "create_session")!.description).toMatch(
        /run_code is withdrawn: this server is shared .* rlimits level\b.*tools\.runCode\.unsafeUnjailedOnSharedServer/,
      );
      const { withdrawn_tools } = await call<Listing>(carol.client, "list_adapters");
      expect(withdrawn_tools).toEqual([{ name: "run_code", reason: expect.stringMatching(/bwrap not found/) }]);
      expect(withdrawn.stderr()).toMatch(/run_code is withdrawn: .*bwrap not found.*Install bubblewrap/);
      expect(
        await carol.client.callTool({ name: "run_code", arguments: { language: "python", code: "print(1)" } }).then(
          (r) => r.isError,
          () => true,
        ),
      ).toBe(true);
    } finally {
      await carol.close();
    }
  });

  it("is offered again only with the explicit opt-in, which the log flags as unsafe", async () => {
    const carol = await connectClient("http", offered, { authorization: `Bearer ${USER}` });
    try {
      const ran = await call<{ stdout: string; isolation: string }>(carol.client, "run_code", {
        language: "python",
        code: "print(6 * 7)",
      });
      expect(ran).toMatchObject({ stdout: "42\n", isolation: "rlimits" });
      expect((await call<Listing>(carol.client, "list_adapters")).withdrawn_tools).toEqual([]);
      expect(offered.stderr()).toMatch(/run_code offered on a shared server WITHOUT a jail/);
      // what the setting's name warns of: the probes of the escalation test do get through here
      const marker = `weact-escape-${process.pid}-${Date.now()}`;
      const params = { serverPid: offered.process.pid, port: Number(new URL(offered.url).port), marker, ...optedIn };
      const escaped = await call<{ stdout: string }>(carol.client, "run_code", {
        language: "python",
        code: ESCALATION,
        stdin: JSON.stringify(params),
      });
      const steps = JSON.parse(escaped.stdout) as Record<string, string>;
      // the grandchild execs on its own after the snippet returns: on a loaded machine it shows a moment later
      await expect.poll(() => processesWith(marker).length, { timeout: 5_000, interval: 100 }).toBeGreaterThan(0);
      for (const pid of processesWith(marker)) process.kill(Number(pid), "SIGKILL");
      expect(steps["read the admin token file"]).toMatch(/^succeeded: .*admin-token/);
      expect(steps["read the server's command line"]).toMatch(/^succeeded: .*main\.js/);
      expect(steps["connect to the server's port"]).toMatch(/^succeeded/);
    } finally {
      await carol.close();
    }
  });
});

describe("the jail's masks", () => {
  it("hides the server's files even where they sit under a folder the jail binds", async ({ skip }) => {
    if (!jailTestable()) return skip(NO_BWRAP);
    const isolation = await detectIsolation();
    expect(isolation.level).toBe("bubblewrap");
    // stand-ins for a server installed under a bound system folder (e.g. a global npm install under /usr)
    const file = isolation.jail!.bwrap; // not needed inside the jail
    const dir = "/usr/share";
    const masked = await hidingPaths(isolation, [file, `${dir}/doc`, dir, "/nonexistent/weact"]);
    // what lies inside a masked folder needs no mask of its own; paths outside the binds need none either
    expect(masked.jail!.masks).toEqual([
      { path: dir, kind: "dir" },
      { path: file, kind: "file" },
    ]);
    const code = `import os\nprint(os.path.getsize(${JSON.stringify(file)}), len(os.listdir(${JSON.stringify(dir)})))`;
    const before = await runCode({ language: "python", code }, { isolation, limits: DEFAULT_RUN_CODE_LIMITS });
    const after = await runCode({ language: "python", code }, { isolation: masked, limits: DEFAULT_RUN_CODE_LIMITS });
    expect(before.stdout).not.toBe("0 0\n");
    expect(after.stdout).toBe("0 0\n");
  });
});

describe("the adapter library on a shared server", () => {
  it("refuses a FIFO adapter (also behind a symlink) while every other client is answered within a second", async () => {
    const admin = await connectClient("http", server, { authorization: `Bearer ${ADMIN}` });
    const user = await connectClient("http", server, { authorization: `Bearer ${USER}` });
    try {
      for (const file of ["fifo.gguf", "link.gguf"]) {
        const refused = callError(admin.client, "register_adapter", { alias: "piped", file, description: "a FIFO" });
        const started = performance.now();
        const [listed, anonymous] = await Promise.all([
          user.client.callTool({ name: "list_adapters", arguments: {} }),
          fetch(`${server.url}/mcp`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }),
        ]);
        expect(performance.now() - started).toBeLessThan(1_000);
        expect(listed.isError).toBeFalsy();
        expect(anonymous.status).toBe(401);
        expect(await refused).toMatch(/is a FIFO, not a regular file/);
      }
      // nothing half-registered
      const names = (
        (await user.client.callTool({ name: "list_adapters", arguments: {} })).structuredContent as {
          adapters: { alias: string }[];
        }
      ).adapters.map((a) => a.alias);
      expect(names).not.toContain("piped");
    } finally {
      await Promise.all([admin.close(), user.close()]);
    }
  });

  it("lets only an admin token (server.adminTokenFile) change the library; a user token's attempts change nothing", async () => {
    const user = await connectClient("http", server, { authorization: `Bearer ${USER}` });
    const admin = await connectClient("http", server, { authorization: `Bearer ${ADMIN}` });
    try {
      const manifestBefore = readFileSync(files.manifest, "utf8");
      for (const [tool, args] of [
        ["register_adapter", { alias: "extra", file: "code.gguf", description: "more" }],
        ["refresh_adapter", { alias: "plan", file: "write-v2.gguf", description: "replaced" }],
        ["unregister_adapter", { alias: "plan" }],
      ] as const) {
        expect(await callError(user.client, tool, args)).toMatch(/needs an admin token \(server\.adminTokenFile\)/);
      }
      expect(readFileSync(files.manifest, "utf8")).toBe(manifestBefore);
      const aliases = async () =>
        (
          (await user.client.callTool({ name: "list_adapters", arguments: {} })).structuredContent as {
            adapters: { alias: string }[];
          }
        ).adapters.map((a) => a.alias);
      expect(await aliases()).toEqual(["plan", "search", "write"]);
      await call(admin.client, "register_adapter", { alias: "extra", file: "code.gguf", description: "more" });
      expect(await aliases()).toContain("extra");
      expect(readFileSync(files.manifest, "utf8")).toMatch(/"extra"/);
    } finally {
      await Promise.all([user.close(), admin.close()]);
    }
  });

  it("on the 2026-07-28 revision too: the admin tools are listed to an admin token only, and refuse a user token's call", async () => {
    const connect2026 = async (token: string) => {
      const client = new Client2026(
        { name: "c", version: "0" },
        { versionNegotiation: { mode: { pin: "2026-07-28" } } },
      );
      await client.connect(
        new Transport2026(new URL(`${server.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
        }),
      );
      return client;
    };
    const [user, admin] = await Promise.all([connect2026(USER), connect2026(ADMIN)]);
    try {
      const names = async (c: Client2026) => (await c.listTools()).tools.map((t) => t.name);
      expect(await names(user)).not.toContain("register_adapter");
      expect(await names(admin)).toEqual(
        expect.arrayContaining(["register_adapter", "refresh_adapter", "unregister_adapter"]),
      );
      const manifestBefore = readFileSync(files.manifest, "utf8");
      const refused = await user.callTool({ name: "unregister_adapter", arguments: { alias: "plan" } });
      expect(refused.isError).toBe(true);
      expect(JSON.stringify(refused.content)).toMatch(/needs an admin token \(server\.adminTokenFile\)/);
      expect(readFileSync(files.manifest, "utf8")).toBe(manifestBefore);
    } finally {
      await Promise.all([user.close(), admin.close()]);
    }
  });

  it("refuses a FIFO as the GGUF reader's input without waiting for a writer", () => {
    const started = performance.now();
    expect(() => readGgufHeader(fifo)).toThrow(GgufFormatError);
    expect(() => readGgufHeader(fifo)).toThrow(/not a regular file \(a FIFO\)/);
    expect(() => readGgufHeader(files.adapterDir)).toThrow(/not a regular file \(a directory\)/);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it("refuses a FIFO as the base model at start-up, naming it", async () => {
    const model = fifoIn(tempDir(), "model.gguf");
    const child = spawn(process.execPath, [MAIN, "--http", "0", "--config", testConfig(), "--model", model], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(err).toMatch(/not a regular file \(a FIFO\)/);
  });
});

describe("a huge adapter on a shared server", () => {
  // a server of its own: ~250 MB versions stay resident in it, and the last test kills it
  const team = teamServerFiles();
  const TMPDIR = tempDir("weact-tmp-");
  /** Where the server links a version whose file another version holds, as it loads it (its user's own folder). */
  const linkDir = join(TMPDIR, `weact-adapters-${process.getuid!()}`);
  const leftovers = () => (existsSync(linkDir) ? readdirSync(linkDir) : []);
  let huge: string;
  let big: HttpServer;
  let admin: Connected;
  beforeAll(async () => {
    huge = writeZeroLora(team.adapterDir, "huge", 6600);
    big = await spawnHttpServer(team.args, { TMPDIR });
    admin = await connectClient("http", big, { authorization: `Bearer ${ADMIN}` });
  });
  afterAll(async () => {
    await admin?.close().catch(() => undefined);
    big?.process.kill("SIGKILL");
    rmSync(huge, { force: true });
  });
  const served = async (client: Connected, alias: string) =>
    (await call<{ adapters: { alias: string; sha256: string }[] }>(client.client, "list_adapters")).adapters.find(
      (a) => a.alias === alias,
    )?.sha256;

  it("registering it, also under a second alias, keeps every other client answered within a second", async () => {
    const user = await connectClient("http", big, { authorization: `Bearer ${USER}` });
    try {
      // the second alias is another version of the same file: node-llama-cpp knows adapters by path, so it is loaded
      // through a path of its own (once a copy of the file, made on the event loop: seconds for 250 MB)
      for (const alias of ["huge", "huge-twin"]) {
        let registered = false;
        const registering = call(admin.client, "register_adapter", { alias, file: "huge.gguf", description: "big" });
        void registering.finally(() => (registered = true));
        let slowest = 0;
        let answered = 0;
        while (!registered) {
          const started = performance.now();
          await call(user.client, "list_adapters");
          slowest = Math.max(slowest, performance.now() - started);
          answered++;
        }
        await registering;
        expect(answered).toBeGreaterThan(1);
        expect(slowest, `list_adapters while ${alias} registered`).toBeLessThan(1_000);
      }
      expect(await served(user, "huge-twin")).toBe(await served(user, "huge"));
    } finally {
      await user.close();
    }
  });

  it("eight quick refresh_adapter calls leave plan on the last one's weights, never on an older one", async () => {
    const files = Array.from({ length: 8 }, (_, i) =>
      writeLoraVariant(team.adapterDir, `plan-v${i}`, { seed: 40 + i }),
    );
    let last = "";
    for (const file of files) {
      last = (await call<{ current: { sha256: string } }>(admin.client, "refresh_adapter", { alias: "plan", file }))
        .current.sha256;
      // just over the watcher's 150 ms, so each manifest write is a reload of its own; reloads that re-hash the
      // ~500 MB resident pile up (each once applied the manifest as read before the refreshes that came after it)
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const seen = new Set<string | undefined>();
    for (const until = Date.now() + 2_000; Date.now() < until;) {
      seen.add(await served(admin, "plan"));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect([...seen]).toEqual([last]);
    expect(JSON.parse(readFileSync(team.manifest, "utf8")).adapters[0]).toMatchObject({
      alias: "plan",
      file: "plan-v7.gguf",
    });
  });

  it("a server killed while it loads one leaves no temp file once it runs again", async () => {
    await call(admin.client, "unregister_adapter", { alias: "huge-twin" });
    const libraryBefore = readdirSync(team.adapterDir).sort();
    let registered = false;
    void admin.client
      .callTool({ name: "register_adapter", arguments: { alias: "huge-again", file: "huge.gguf", description: "big" } })
      .catch(() => undefined)
      .finally(() => (registered = true));
    while (leftovers().length === 0 && !registered) await new Promise((resolve) => setTimeout(resolve, 5));
    const exited = new Promise((resolve) => big.process.once("exit", resolve));
    big.process.kill("SIGKILL");
    await exited;
    // the kill came while the version was loading through a path of its own, which it left behind
    expect(leftovers(), "the temporary path seen before the kill").toHaveLength(1);
    expect(readdirSync(team.adapterDir).sort()).toEqual(libraryBefore);
    // the next server to start with that temporary folder removes it (one with the demo library: the killed one's
    // would only load 250 MB again first)
    const next = await spawnHttpServer(teamServerFiles().args, { TMPDIR });
    try {
      expect(leftovers()).toEqual([]);
    } finally {
      await next.stop();
    }
  });
});

describe("run_code when the server dies mid-run", () => {
  it("leaves no snippet process behind and removes its workdir", async ({ skip }) => {
    if (!jailTestable()) return skip(NO_BWRAP);
    const team = teamServerFiles();
    const TMPDIR = tempDir("weact-tmp-");
    const marker = `weact-orphan-${process.pid}-${Date.now()}`;
    // exec in place, so the snippet's own process carries the marker on its command line
    const code = `import os, sys\nos.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(45)", "${marker}"])`;
    const dying = await spawnHttpServer(team.args, { TMPDIR });
    const carol = await connectClient("http", dying, { authorization: `Bearer ${USER}` });
    const pending = carol.client
      .callTool({ name: "run_code", arguments: { language: "python", code, timeout_s: 45 } })
      .catch(() => undefined);
    const workdirs = () => readdirSync(TMPDIR).filter((name) => name.startsWith("weact-run-"));
    // generous: on a loaded CI machine (a real model's tests beside this one) the watcher's own start takes seconds
    const waitFor = async (done: () => boolean, what: string) => {
      for (const until = Date.now() + 30_000; !done();) {
        if (Date.now() > until) throw new Error(`timed out waiting until ${what}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    try {
      await waitFor(() => processesWith(marker).length > 0, "the snippet runs");
      expect(workdirs()).toHaveLength(1);
      dying.process.kill("SIGKILL");
      await waitFor(() => processesWith(marker).length === 0, "no process of the snippet is left");
      await waitFor(() => workdirs().length === 0, "the workdir is removed");
    } finally {
      for (const pid of processesWith(marker)) process.kill(Number(pid), "SIGKILL");
      dying.process.kill("SIGKILL");
      // the server is gone: the call's outcome no longer matters, only that nothing waits on it
      void pending;
      void carol.close().catch(() => undefined);
    }
  }, 120_000);
});
