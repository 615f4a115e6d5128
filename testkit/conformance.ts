/**
 * `npm run check:conformance`: the official MCP conformance suite against one built server over Streamable HTTP,
 * spawned on a loopback port with the trained demo, once per revision it serves on that port: 2025-11-25 with
 * `@modelcontextprotocol/conformance` 0.1.16 (its active scenarios), 2026-07-28 with 0.2.0-alpha.10 (installed beside
 * it as `conformance-2026`; every scenario, pending ones included, so the stateless-server scenario runs). The scenarios
 * that need the suite's own fixture tools, prompts and resources (none ships in this server) are listed, one reason per
 * line, in conformance/expected-failures-<revision>.yaml; any other failure, or an expected one that passes, fails the
 * check.
 *
 * The suite needs Node 22 (it imports `fs.globSync`); the project runs on Node 20, so on an older Node the check
 * takes Node 22's binary from npm (`node-<platform>-<arch>`), once per machine, into ~/.cache/weact-mcp/node.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { PACKAGE_ROOT } from "../src/paths.js";
import { spawnHttpServer } from "./mcpClient.js";

const NODE_22 = "22.23.5";

/** Each revision: the suite's package (an npm alias for the second version) and its arguments. */
const RUNS = [
  { spec: "2025-11-25", suite: "@modelcontextprotocol/conformance", args: [] },
  { spec: "2026-07-28", suite: "conformance-2026", args: ["--suite", "all"] },
];

/** A Node binary of at least 22: this one, or Node 22's from npm, unpacked once per machine. */
function node22(): string {
  if (Number(process.versions.node.split(".")[0]) >= 22) return process.execPath;
  const dir = join(homedir(), ".cache", "weact-mcp", "node", `${NODE_22}-${process.platform}-${process.arch}`);
  const bin = join(dir, "bin", "node");
  if (existsSync(bin)) return bin;
  const work = mkdtempSync(join(tmpdir(), "weact-node-"));
  try {
    process.stderr.write(`check:conformance: fetching Node ${NODE_22} from npm (once per machine) into ${dir}\n`);
    const pkg = `node-${process.platform}-${process.arch}@${NODE_22}`;
    const tarball = execFileSync("npm", ["pack", pkg, "--pack-destination", work, "--silent"], { encoding: "utf8" })
      .trim()
      .split("\n")
      .at(-1)!;
    execFileSync("tar", ["-xzf", join(work, tarball), "-C", work]);
    mkdirSync(dirname(dir), { recursive: true });
    renameSync(join(work, "package"), dir);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return bin;
}

async function main() {
  const node = node22();
  const server = await spawnHttpServer();
  try {
    const url = `${server.url}/mcp`;
    const failed: string[] = [];
    for (const { spec, suite, args } of RUNS) {
      const cli = join(dirname(createRequire(import.meta.url).resolve(`${suite}/package.json`)), "dist", "index.js");
      const expected = join(PACKAGE_ROOT, "conformance", `expected-failures-${spec}.yaml`);
      process.stdout.write(
        `check:conformance: ${spec} server scenarios against ${url} (expected failures: ${expected})\n`,
      );
      const code = await new Promise<number>((resolve, reject) => {
        const child = spawn(
          node,
          [cli, "server", "--url", url, "--spec-version", spec, ...args, "--expected-failures", expected],
          { stdio: "inherit" },
        );
        child.once("error", reject);
        child.once("exit", (c) => resolve(c ?? 1));
      });
      if (code !== 0) failed.push(spec);
    }
    process.stdout.write(
      failed.length
        ? `check:conformance: failed for ${failed.join(", ")}\n`
        : "check:conformance: both revisions pass\n",
    );
    process.exitCode = failed.length ? 1 : 0;
  } finally {
    await server.stop();
  }
}

main().catch((err) => {
  process.stderr.write(`check:conformance failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
