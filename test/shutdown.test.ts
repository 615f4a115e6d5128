import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { tempDir } from "./helpers/files.js";
import { MAIN, startHttpServer, testConfig } from "./helpers/server.js";
import { connectClient } from "../src/client/mcpClient.js";

it("on SIGTERM stops accepting, cancels the run in flight, keeps its trace whole, frees the model and exits 0", async () => {
  const traceDir = join(tempDir(), "traces");
  const config = testConfig({ harness: { traceDir, maxTokensPerTurn: 64 } });
  const server = await startHttpServer([], config);
  const { client, close } = await connectClient("http", { url: server.url });
  void client.callTool({ name: "run_task", arguments: { task: "interrupted by a shutdown", policy: "hard" } }, undefined, { timeout: 300_000 }).catch(() => undefined); // the server goes away under it; what matters is what it left behind
  // wait until the run has started writing its trace
  await expect.poll(() => (existsSync(traceDir) ? readdirSync(traceDir).length : 0), { timeout: 60_000 }).toBeGreaterThan(0);
  await new Promise((r) => setTimeout(r, 500));
  const exited = new Promise<number | null>((resolve) => server.process.once("exit", (code) => resolve(code)));
  server.process.kill("SIGTERM");
  expect(await exited).toBe(0);
  await close().catch(() => undefined);
  const [file] = readdirSync(traceDir);
  const events = readFileSync(join(traceDir, file!), "utf8").trim().split("\n").map((l) => JSON.parse(l));
  expect(events[0]).toMatchObject({ type: "run_start", task: "interrupted by a shutdown" });
  expect(events.at(-1)).toMatchObject({ type: "run_end", cancelled: true });
  expect(server.stderr()).not.toMatch(/uncaught|unhandled/i);
}, 120_000);

it("a second signal forces the exit", async () => {
  const child = spawn(process.execPath, [MAIN, "--http", "0", "--config", testConfig()], { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, WEACT_LOG_LEVEL: "info" } });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  await expect.poll(() => /listening on/.test(err), { timeout: 60_000 }).toBe(true);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  child.kill("SIGTERM");
  child.kill("SIGTERM");
  const code = await exited;
  expect([0, 1]).toContain(code);
  expect(err).toMatch(/shutting down/);
}, 120_000);
