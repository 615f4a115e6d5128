import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { tempDir } from "../helpers/files.js";
import { readme } from "../helpers/readme.js";

/**
 * scripts/ensureSystemPackages.mjs, run as `npm test` runs it, on a PATH of stand-ins: a folder holding a stub for
 * each command the tests need, so the machine's own packages do not matter and nothing is ever installed. apt-get is
 * a stub too: it logs its calls and, told to install, writes the stubs of the packages it was given.
 */
const SCRIPT = join(PACKAGE_ROOT, "scripts", "ensureSystemPackages.mjs");
const COMMANDS = ["chromium", "bwrap", "python3", "prlimit", "git", "cmake", "g++", "make"];
/** The Debian package of each command that apt-get's stub can install. */
const PROVIDES: Record<string, string> = { chromium: "chromium", bubblewrap: "bwrap" };
const root = process.getuid?.() === 0;
/** A user other than root: nobody, when the tests run as root. */
const NOBODY = 65534;

function writeStub(dir: string, name: string, body: string): void {
  writeFileSync(join(dir, name), body);
  chmodSync(join(dir, name), 0o755);
}

/** A PATH folder with every command but `without`, and apt-get's stub (unless `aptGet` is false). */
function pathFolder(without: readonly string[], aptGet: { exitCode: number } | false = { exitCode: 0 }): string {
  const dir = tempDir("weact-path-");
  // readable and writable by nobody: a stub apt-get wrongly run as nobody must still leave its log
  chmodSync(dir, 0o777);
  for (const name of COMMANDS.filter((c) => !without.includes(c))) writeStub(dir, name, "#!/bin/sh\nexit 0\n");
  if (aptGet)
    writeStub(
      dir,
      "apt-get",
      `#!${process.execPath}
const fs = require("node:fs");
const args = process.argv.slice(2);
fs.appendFileSync(${JSON.stringify(join(dir, "apt-get.log"))}, "DEBIAN_FRONTEND=" + process.env.DEBIAN_FRONTEND + " " + args.join(" ") + "\\n");
if (args[0] === "install" && ${aptGet.exitCode} !== 0) { console.error("E: Unable to locate package " + args.at(-1)); process.exit(${aptGet.exitCode}); }
const provides = ${JSON.stringify(PROVIDES)};
if (args[0] === "install")
  for (const pkg of args.filter((a) => provides[a]))
    fs.writeFileSync(${JSON.stringify(dir)} + "/" + provides[pkg], "#!/bin/sh\\nexit 0\\n", { mode: 0o755 });
`,
    );
  return dir;
}

/** The script with only that folder on PATH, as this user or (`asUser`) as one that is not root. */
async function ensure(dir: string, asUser = false) {
  const user = asUser && root ? { uid: NOBODY, gid: NOBODY } : {};
  return execa(process.execPath, [SCRIPT], {
    env: { PATH: dir },
    extendEnv: false,
    reject: false,
    stripFinalNewline: false,
    ...user,
  });
}

const aptGetLog = (dir: string) =>
  existsSync(join(dir, "apt-get.log")) ? readFileSync(join(dir, "apt-get.log"), "utf8") : "";

describe("npm test's system packages (scripts/ensureSystemPackages.mjs)", () => {
  it("runs first in pretest, before the build", () => {
    const scripts = (JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { scripts: object })
      .scripts as Record<string, string>;
    expect(scripts.pretest!.split(" && ")[0]).toBe("node scripts/ensureSystemPackages.mjs");
  });

  it("with every command there, exits 0 and says nothing", async () => {
    const dir = pathFolder([]);
    const run = await ensure(dir);
    expect({ exitCode: run.exitCode, stdout: run.stdout, stderr: run.stderr }).toEqual({
      exitCode: 0,
      stdout: "",
      stderr: "",
    });
    expect(aptGetLog(dir)).toBe("");
  });

  it("as a user, stops at once naming the exact install line and why, and runs nothing", async () => {
    const dir = pathFolder(["chromium", "bwrap"]);
    const run = await ensure(dir, true);
    expect(run.exitCode).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain("\n  sudo apt-get install -y chromium bubblewrap\n");
    expect(run.stderr).toContain("the status page's browser test; the run_code jail's tests");
    expect(aptGetLog(dir)).toBe("");
  });

  it("where pip is missing, asks for python3-pip (python3 -m pip fails)", async () => {
    const dir = pathFolder([]);
    writeStub(dir, "python3", '#!/bin/sh\n[ "$1" = -m ] && exit 1\nexit 0\n');
    const run = await ensure(dir, true);
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toContain("\n  sudo apt-get install -y python3-pip\n");
  });

  it("without apt-get, names the missing commands and Debian's install line", async () => {
    const dir = pathFolder(["chromium"], false);
    const run = await ensure(dir);
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toMatch(/needs chromium \(the status page's browser test\), .*no apt-get/);
    expect(run.stderr).toContain("(on Debian: sudo apt-get install -y chromium)");
  });

  it.skipIf(!root)(
    "as root, installs the missing packages with apt-get after one line saying which and why",
    async () => {
      const dir = pathFolder(["chromium", "bwrap"]);
      const run = await ensure(dir);
      expect(run.stderr).toBe("");
      expect(run.stdout).toBe(
        "installing chromium, bubblewrap (needed by: the status page's browser test; the run_code jail's tests)\n",
      );
      expect(run.exitCode).toBe(0);
      expect(aptGetLog(dir)).toBe(
        "DEBIAN_FRONTEND=noninteractive update -qq\nDEBIAN_FRONTEND=noninteractive install -y -qq chromium bubblewrap\n",
      );
    },
  );

  it.skipIf(!root)("as root, stops with apt-get's own error when it fails", async () => {
    const dir = pathFolder(["chromium"], { exitCode: 100 });
    const run = await ensure(dir);
    expect(run.exitCode).toBe(1);
    expect(run.stdout).toBe("installing chromium (needed by: the status page's browser test)\n");
    expect(run.stderr).toContain("E: Unable to locate package chromium");
    expect(run.stderr).toContain("apt-get install -y -qq chromium failed (exit 100)");
  });

  it("the README says, before its test command, the first run's time and the line that installs every package", async () => {
    // every command missing, as a user: the script's own install line for all of them
    const run = await ensure(pathFolder(COMMANDS), true);
    const line = /\n {2}(sudo apt-get install -y [^\n]+)\n/.exec(run.stderr)?.[1];
    expect(line).toBe("sudo apt-get install -y chromium bubblewrap python3 python3-pip util-linux git cmake g++ make");
    const before = readme().split("npm ci && npm test")[0]!;
    expect(before).toContain(`\`${line}\``);
    expect(before).toMatch(/first `npm test`\s+also builds llama-server/);
    expect(before).toMatch(/the whole first run takes about \d+ minutes on a fresh 2-core\s+machine/);
    expect(before).toContain("`~/.cache/weact-mcp`");
  });
});
