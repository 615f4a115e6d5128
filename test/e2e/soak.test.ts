import { afterAll, beforeAll, expect, it } from "vitest";
import { runSoak } from "../../bench/soak.js";
import { startHttpServer, testConfig, type HttpServer } from "../helpers/server.js";

let server: HttpServer;
beforeAll(async () => {
  server = await startHttpServer([], testConfig({ model: { gpu: false, contextSize: 4096, sequencesPerContext: 8 } }));
});
afterAll(async () => server?.stop());

it("serves a short soak over Streamable HTTP and SSE with no errors, no cross-session leak and bounded memory", async () => {
  const report = await runSoak(server.url, { clients: 3, seconds: 10, measuredCycles: 12 });
  console.log("short soak:", JSON.stringify(report));
  // the bound is about steady state: memory is measured from when every client has used every adapter,
  // and the run goes on long enough after that for a leak per cycle to show (throughput: npm run soak)
  expect(report.warmedUp).toBe(true);
  expect(report.cyclesMeasured).toBeGreaterThanOrEqual(12);
  expect(report.errors).toEqual({});
  expect(report.leaks).toBe(0);
  // stated bound: at most 64 MB of growth over the run (sessions are closed; caches and adapters are fixed)
  expect(report.rssEndMb - report.rssStartMb).toBeLessThan(64);
}, 120_000);
