/** npm run soak [-- --clients N --seconds S]: a spawned server under a bounded loopback load. */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { spawnHttpServer } from "../testkit/mcpClient.js";
import { runSoak } from "./soak.js";

const { values } = parseArgs({
  options: { clients: { type: "string", default: "4" }, seconds: { type: "string", default: "120" } },
});
const config = join(mkdtempSync(join(tmpdir(), "weact-soak-")), "weact.json");
writeFileSync(
  config,
  JSON.stringify({
    model: { gpu: false, demo: "random", contextSize: 4096, sequencesPerContext: 8 },
    sessions: { maxSessionsPerClient: 64 },
  }),
);
const server = await spawnHttpServer(["--config", config]);
try {
  const report = await runSoak(server.url, { clients: Number(values.clients), seconds: Number(values.seconds) });
  process.stdout.write(JSON.stringify(report, null, 2) + "\n");
  if (report.leaks > 0) process.exitCode = 1;
} finally {
  await server.stop();
}
