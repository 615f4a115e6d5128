import { describe, it, expect, beforeAll, beforeEach, afterAll } from "vitest";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { randomUUID } from "node:crypto";
import { jailTestable, NO_BWRAP } from "../helpers/host.js";
import {
  DEFAULT_RUN_CODE_LIMITS,
  detectIsolation,
  runCode,
  type DetectIsolationOptions,
  type IsolationInfo,
  type IsolationLevel,
  type RunCodeLimits,
  type RunCodeRequest,
  type RunCodeResult,
} from "../../src/externalTools/runCode/index.js";

/** Host processes whose command line contains `marker` (host PIDs, so this also sees into a jail's pid namespace). */
function processesWith(marker: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(marker)) pids.push(Number(entry));
    } catch {
      // exited while scanning
    }
  }
  return pids;
}

/**
 * "gone" once reaped (kill(pid, 0) throws ESRCH). "zombie": dead, but its parent has not reaped it yet; a
 * descendant orphaned outside a jail is reparented to the host's pid 1, which in some containers never reaps.
 */
function stateOf(pid: number): "gone" | "zombie" | "running" {
  try {
    process.kill(pid, 0);
  } catch (error) {
    expect((error as NodeJS.ErrnoException).code).toBe("ESRCH");
    return "gone";
  }
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z") ? "zombie" : "running";
}

// run_code makes its workdirs in os.tmpdir(): a private one here, so the runs of test files running at the
// same time never show up in this file's checks for leftover workdirs
process.env.TMPDIR = mkdtempSync(path.join(tmpdir(), "weact-runcode-test-"));

function runDirs(): Set<string> {
  return new Set(readdirSync(tmpdir()).filter((name) => name.startsWith("weact-run-")));
}

/** Both levels the module runs at: the jail detection picks where bwrap is, and the no-jail level on purpose. */
const levels: Array<{ name: string; options: DetectIsolationOptions; jail: boolean }> = [
  { name: "detected level (the bubblewrap jail)", options: {}, jail: true },
  { name: "rlimits level (bubblewrap not allowed)", options: { allowBubblewrap: false }, jail: false },
];

describe.each(levels)("runCode at the $name", ({ options, jail }) => {
  let isolation: IsolationInfo;
  let noJail = false;
  const run = (request: RunCodeRequest, limits: RunCodeLimits = DEFAULT_RUN_CODE_LIMITS): Promise<RunCodeResult> =>
    runCode(request, { isolation, limits });

  beforeAll(async () => {
    // without bwrap: a local run skips the jail's tests (saying why), a CI run fails them here
    noJail = jail && !jailTestable();
    if (noJail) return;
    isolation = await detectIsolation(options);
    expect(isolation.interpreters.python, "these tests need python3 on the host").toBeDefined();
    // decided apart from the detection under test: with bwrap on PATH only the jail is acceptable
    if (jail) expect(isolation.level).toBe("bubblewrap");
  });
  beforeEach(({ skip }) => skip(noJail, NO_BWRAP));

  it("runs python and javascript and reports the level", async () => {
    const py = await run({ language: "python", code: "print('hello from', 'python')" });
    expect(py).toMatchObject({ stdout: "hello from python\n", exitCode: 0, signal: null, timedOut: false });
    expect(py.isolation).toBe(isolation.level);
    const js = await run({ language: "javascript", code: "console.log('hello from', 'javascript')" });
    expect(js).toMatchObject({
      stdout: "hello from javascript\n",
      exitCode: 0,
      signal: null,
      isolation: isolation.level,
    });
  });

  it("passes stdin through", async () => {
    const stdin = "line one\nline two\n";
    const py = await run({ language: "python", code: "import sys; sys.stdout.write(sys.stdin.read())", stdin });
    expect(py.stdout).toBe(stdin);
    const js = await run({
      language: "javascript",
      code: "process.stdout.write(require('fs').readFileSync(0))",
      stdin,
    });
    expect(js.stdout).toBe(stdin);
  });

  it("reports a syntax error as a result", async () => {
    const py = await run({ language: "python", code: "def broken(:\n  pass" });
    expect(py.exitCode).not.toBe(0);
    expect(py.stderr).toContain("SyntaxError");
    const js = await run({ language: "javascript", code: "function (" });
    expect(js.exitCode).not.toBe(0);
    expect(js.stderr).toContain("SyntaxError");
  });

  it("kills an infinite loop at the wall-time limit and removes the workdir", async () => {
    const before = runDirs();
    const result = await run({ language: "python", code: "while True:\n  pass", timeoutS: 1 });
    expect(result).toMatchObject({ timedOut: true, exitCode: null, signal: "SIGKILL" });
    expect(result.durationMs).toBeGreaterThanOrEqual(1000);
    expect(result.durationMs).toBeLessThan(2500);
    expect([...runDirs()].filter((name) => !before.has(name))).toEqual([]);
  });

  it("kills the whole process tree, including a grandchild in its own session", async () => {
    const marker = `weact-tree-${randomUUID()}`;
    const code = [
      "import subprocess, sys",
      `marker = ${JSON.stringify(marker)}`,
      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', marker])",
      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', marker], start_new_session=True)",
      "subprocess.Popen([sys.executable, '-c', 'while True: pass', marker])",
      "print('started')",
      "while True:\n  pass",
    ].join("\n");
    const running = run({ language: "python", code, timeoutS: 2 });
    let seen: number[] = [];
    for (let waited = 0; seen.length < 3 && waited < 1500; waited += 50) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      seen = processesWith(marker);
    }
    expect(seen).toHaveLength(3);
    const result = await running;
    expect(result).toMatchObject({ timedOut: true, stdout: "started\n" });
    const states = seen.map(stateOf);
    switch (isolation.level) {
      case "bubblewrap":
        // the dying pid-namespace init reaps everything inside before bwrap exits
        expect(states).toEqual(["gone", "gone", "gone"]);
        break;
      case "rlimits":
        expect(states.filter((state) => state === "running")).toEqual([]);
        break;
    }
    expect(processesWith(marker)).toEqual([]);
  });

  it("stops a python memory hog with MemoryError", async () => {
    const code = "hog = []\nwhile True:\n  hog.append(bytearray(100 * 1024 * 1024))";
    const result = await run({ language: "python", code, timeoutS: 10 });
    expect(result.timedOut).toBe(false);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toContain("MemoryError");
    expect(result.durationMs).toBeLessThan(5000);
  });

  it("stops javascript memory hogs (V8 heap and buffers)", async () => {
    const heap = await run({
      language: "javascript",
      code: "const hog = []; while (true) hog.push(new Array(1e6).fill(1.5));",
      timeoutS: 10,
    });
    expect(heap.timedOut).toBe(false);
    expect(heap.exitCode === 0).toBe(false);
    expect(heap.exitCode !== null || heap.signal !== null).toBe(true);
    expect(heap.stderr).toMatch(/out of memory/i);
    const buffers = await run({
      language: "javascript",
      code: "const hog = []; while (true) hog.push(Buffer.alloc(100 * 1024 * 1024, 1));",
      timeoutS: 10,
    });
    expect(buffers.timedOut).toBe(false);
    expect(buffers.exitCode).toBe(1);
    expect(buffers.stderr).toContain("RangeError");
    expect(heap.durationMs + buffers.durationMs).toBeLessThan(8000);
  });

  it("truncates huge output with a marker and keeps draining", async () => {
    const cap = DEFAULT_RUN_CODE_LIMITS.maxOutputBytes;
    const marker = `\n[... output truncated at ${cap} bytes ...]`;
    const result = await run({
      language: "python",
      code: "import sys\nsys.stdout.write('x' * 5_000_000)\nsys.stderr.write('e' * 10)",
    });
    expect(result).toMatchObject({ exitCode: 0, truncated: { stdout: true, stderr: false }, stderr: "eeeeeeeeee" });
    expect(result.stdout).toBe("x".repeat(cap) + marker);

    const endless = await run({
      language: "javascript",
      code: "for (;;) process.stdout.write('y'.repeat(4096));",
      timeoutS: 1,
    });
    expect(endless.timedOut).toBe(true);
    expect(endless.truncated.stdout).toBe(true);
    expect(endless.stdout.length).toBe(cap + marker.length);
  });

  it("does not pass the server's environment through", async () => {
    const secret = `s3cret-${randomUUID()}`;
    process.env.WEACT_TEST_SECRET = secret;
    try {
      const py = await run({ language: "python", code: "import os; print(os.environ)" });
      const js = await run({ language: "javascript", code: "console.log(JSON.stringify(process.env))" });
      for (const result of [py, js]) {
        expect(result.exitCode).toBe(0);
        expect(result.stdout).not.toContain(secret);
        expect(result.stdout).not.toContain("WEACT_TEST_SECRET");
      }
    } finally {
      delete process.env.WEACT_TEST_SECRET;
    }
  });

  describe("escapes", () => {
    let secretDir: string;
    let secretFile: string;
    const secret = `host-only-${randomUUID()}`;
    let server: Server;
    let port: number;
    let connections = 0;

    beforeAll(async () => {
      secretDir = mkdtempSync(path.join(tmpdir(), "weact-secret-"));
      secretFile = path.join(secretDir, "secret.txt");
      writeFileSync(secretFile, secret);
      server = createServer((socket) => {
        connections += 1;
        // the snippet closes without reading
        socket.on("error", () => undefined);
        socket.end("hello from the host\n");
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      port = (server.address() as { port: number }).port;
    });

    afterAll(async () => {
      rmSync(secretDir, { recursive: true, force: true });
      await new Promise((resolve) => server.close(resolve));
    });

    /** The escape tests assert exactly what each level promises; a new level must be added here to pass. */
    function expectLevel(result: RunCodeResult): IsolationLevel {
      expect(result.isolation).toBe(isolation.level);
      return isolation.level;
    }

    it("reads and writes outside the workdir only where the level allows it", async () => {
      const escaped = path.join(secretDir, "escaped.txt");
      const targets = [secretFile, path.resolve("package.json"), "/etc/passwd"];
      const code = [
        "import json",
        "report = {}",
        `for target in ${JSON.stringify(targets)}:`,
        "  try:",
        "    report[target] = open(target).read()",
        "  except OSError as error:",
        "    report[target] = type(error).__name__",
        "try:",
        `  open(${JSON.stringify(escaped)}, 'w').write('out')`,
        "  report['write'] = 'written'",
        "except OSError as error:",
        "  report['write'] = type(error).__name__",
        "print(json.dumps(report))",
      ].join("\n");
      const result = await run({ language: "python", code });
      expect(result.exitCode).toBe(0);
      const report = JSON.parse(result.stdout) as Record<string, string>;
      const level = expectLevel(result);
      switch (level) {
        case "bubblewrap":
          expect(isolation.enforces.filesystem).toBe(true);
          for (const target of targets) expect(report[target]).toMatch(/^(FileNotFoundError|PermissionError)$/);
          expect(report.write).toMatch(/^(FileNotFoundError|PermissionError)$/);
          expect(existsSync(escaped)).toBe(false);
          break;
        case "rlimits":
          // documented non-protection: the snippet has the server user's file access
          expect(isolation.enforces.filesystem).toBe(false);
          expect(isolation.detail).toMatch(/NOT enforced: the snippet can read and write any file/);
          expect(report[secretFile]).toBe(secret);
          expect(report.write).toBe("written");
          expect(readFileSync(escaped, "utf8")).toBe("out");
          break;
        default:
          throw new Error(`no escape expectations for level ${level satisfies never}`);
      }
    });

    it("reaches the network only where the level allows it", async () => {
      const code = [
        "import json, socket",
        "report = {}",
        `for name, address in [('host', ('127.0.0.1', ${port})), ('internet', ('1.1.1.1', 53))]:`,
        "  try:",
        "    socket.create_connection(address, timeout=1).close()",
        "    report[name] = 'connected'",
        "  except OSError as error:",
        "    report[name] = type(error).__name__",
        "print(json.dumps(report))",
      ].join("\n");
      const before = connections;
      const result = await run({ language: "python", code, timeoutS: 5 });
      expect(result.exitCode).toBe(0);
      const report = JSON.parse(result.stdout) as Record<string, string>;
      const level = expectLevel(result);
      switch (level) {
        case "bubblewrap":
          expect(isolation.enforces.network).toBe(true);
          // an own network namespace: its loopback has no listener, and there is no route out
          expect(report.host).toBe("ConnectionRefusedError");
          expect(report.internet).toBe("OSError");
          expect(connections).toBe(before);
          break;
        case "rlimits":
          // documented non-protection; the internet may or may not be reachable from this machine
          expect(isolation.enforces.network).toBe(false);
          expect(isolation.detail).toMatch(/use the network/);
          expect(report.host).toBe("connected");
          expect(connections).toBe(before + 1);
          break;
        default:
          throw new Error(`no network expectations for level ${level satisfies never}`);
      }
    });

    it("caps the process count only where the level can", async () => {
      const limits = { ...DEFAULT_RUN_CODE_LIMITS, maxProcesses: 32 };
      const code = [
        "import os, signal",
        "started = 0",
        "try:",
        "  for _ in range(64):",
        "    if os.fork() == 0:",
        "      signal.pause()",
        "    started += 1",
        "except OSError as error:",
        "  print(type(error).__name__)",
        "print(started)",
      ].join("\n");
      const result = await run({ language: "python", code }, limits);
      expect(result.exitCode).toBe(0);
      const [first, last] = result.stdout.trim().split("\n");
      if (isolation.enforces.processCount) {
        expect(first).toBe("BlockingIOError");
        expect(Number(last)).toBeLessThan(32);
      } else {
        expect(isolation.detail).toMatch(/RLIMIT_NPROC is not applied/);
        expect(first).toBe("64");
      }
    });
  });
});
