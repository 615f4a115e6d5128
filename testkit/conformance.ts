/**
 * `npm run check:conformance`: the official MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.16, the
 * 2025-11-25 revision's server scenarios) against the built server over Streamable HTTP, spawned on a loopback port
 * with the trained demo. The scenarios that need the suite's own fixture tools, prompts and resources (none ships in
 * this server) are listed, one reason per line, in conformance/expected-failures-2025-11-25.yaml; any other failure,
 * or an expected one that passes, fails the check.
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
const SPEC = "2025-11-25";

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
  const suite = createRequire(import.meta.url).resolve("@modelcontextprotocol/conformance/package.json");
  const cli = join(dirname(suite), "dist", "index.js");
  const expected = join(PACKAGE_ROOT, "conformance", `expected-failures-${SPEC}.yaml`);
  const node = node22();
  const server = await spawnHttpServer();
  try {
    const url = `${server.url}/mcp`;
    process.stdout.write(
      `check:conformance: ${SPEC} server scenarios against ${url} (expected failures: ${expected})\n`,
    );
    const code = await new Promise<number>((resolve, reject) => {
      const child = spawn(
        node,
        [cli, "server", "--url", url, "--spec-version", SPEC, "--expected-failures", expected],
        {
          stdio: "inherit",
        },
      );
      child.once("error", reject);
      child.once("exit", (c) => resolve(c ?? 1));
    });
    process.exitCode = code;
  } finally {
    await server.stop();
  }
}

main().catch((err) => {
  process.stderr.write(`check:conformance failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
