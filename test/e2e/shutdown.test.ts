import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import { MAIN, testConfig } from "../helpers/server.js";
import { connectClient, spawnHttpServer } from "../../testkit/mcpClient.js";

it("on SIGTERM stops accepting, cancels the run in flight, keeps its trace whole, frees the model and exits 0", async () => {
  const traceDir = join(tempDir(), "traces");
  const config = testConfig({ harness: { traceDir, maxTokensPerTurn: 64 } });
  const server = await spawnHttpServer(["--config", config], { WEACT_LOG_LEVEL: "info" });
  const { client, close } = await connectClient("http", { url: server.url });
  void client
    .callTool({ name: "run_task", arguments: { task: "interrupted by a shutdown", policy: "hard" } }, undefined, {
      timeout: 300_000,
    })
    .catch(() => undefined); // the server goes away under it; what matters is what it left behind
  // wait until the run has started writing its trace
  await expect
    .poll(() => (existsSync(traceDir) ? readdirSync(traceDir).length : 0), { timeout: 60_000 })
    .toBeGreaterThan(0);
  // ...and is past its first model call, so the signal lands mid-run
  const trace = () => readFileSync(join(traceDir, readdirSync(traceDir)[0]!), "utf8");
  await expect.poll(() => /"type":"model_call"/.test(trace()), { timeout: 60_000 }).toBe(true);
  const exited = new Promise<number | null>((resolve) => server.process.once("exit", (code) => resolve(code)));
  server.process.kill("SIGTERM");
  expect(await exited).toBe(0);
  await close().catch(() => undefined);
  const [file] = readdirSync(traceDir);
  const events = readFileSync(join(traceDir, file!), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  expect(events[0]).toMatchObject({ type: "run_start", task: "interrupted by a shutdown" });
  expect(events.at(-1)).toMatchObject({ type: "run_end", cancelled: true });
  expect(server.stderr()).not.toMatch(/uncaught|unhandled/i);
  // in this order: the listener closed (no new connections), the model freed, and only then the exit
  const log = server.stderr();
  const at = (message: string) => log.indexOf(message);
  expect(at('"shutting down"')).toBeGreaterThan(-1);
  expect(at("HTTP server closed: no new connections")).toBeGreaterThan(at('"shutting down"'));
  expect(at('"base model freed"')).toBeGreaterThan(at("HTTP server closed"));
  await expect(fetch(`${server.url}/mcp`)).rejects.toThrow(); // nothing listens any more
}, 120_000);

it("a second signal during the shutdown forces the exit with code 1", async () => {
  const child = spawn(process.execPath, [MAIN, "--http", "0", "--config", testConfig()], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, WEACT_LOG_LEVEL: "info" },
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  await expect.poll(() => /listening on/.test(err), { timeout: 60_000 }).toBe(true);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  // Both signals pending at once, whatever the load: the stopped process sees them in one turn of its event
  // loop, so the second always arrives while the first shutdown is under way (two SIGTERMs would merge into one).
  child.kill("SIGSTOP");
  child.kill("SIGTERM");
  child.kill("SIGINT");
  child.kill("SIGCONT");
  expect(await exited).toBe(1);
  expect(err).toMatch(/shutting down/);
  expect(err).toMatch(/second signal: exiting now/);
}, 120_000);
