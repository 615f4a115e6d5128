import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServices, type Services } from "../../src/composition/services.js";
import { resolveConfig } from "../../src/config/loadConfig.js";
import { LocalIndex } from "../../src/externalTools/search/LocalIndex.js";
import { runTask } from "../../src/harness/runTaskUnderPolicy.js";
import { createLogger } from "../../src/log.js";
import { DEFAULT_CORPUS, PACKAGE_ROOT } from "../../src/paths.js";
import { OracleDriver } from "../../training/pipeline/OracleDriver.js";
import { readQuestions } from "../../training/qwen/questions.js";
import { questionTask } from "../../training/qwen/tasks.js";
import { TEST_THREADS } from "../helpers/engine.js";
import { tempDir, tempLibrary } from "../helpers/files.js";

/**
 * The oracle plays questions of the Qwen library (any wording, answers that are spans of prose or records, two hops)
 * through the real harness, tools and default corpus on the demo engine: what its stages write is what the
 * capabilities will be trained on.
 */
let services: Services;
let index: LocalIndex;
const logger = createLogger("silent");
beforeAll(async () => {
  const dir = tempDir();
  services = await startServices(
    resolveConfig(
      {
        model: { gpu: false, demo: "random", contextSize: 8192, threads: TEST_THREADS },
        adapters: { manifest: tempLibrary().manifest },
        cache: { background: false },
        sessions: { keepToolResults: 1000 },
        harness: { traceDir: join(dir, "traces") },
        tools: { search: { indexFile: join(dir, "search-index.json") } },
      },
      "qwen-oracle test",
      PACKAGE_ROOT,
    ),
    logger,
  );
  index = LocalIndex.open(DEFAULT_CORPUS, join(dir, "oracle-index.json"), logger);
});
afterAll(async () => {
  index?.close();
  await services?.dispose();
});

/** The tools each picked question's search stage calls: a record's fact in one search; a prose two-hop question whose
 * first result does not show the bridge, so the document is read before the second search. */
const PICKED: Record<string, string[]> = {
  "r-cities-london-river": ["search"],
  "p-seine-7": ["search", "read", "search"],
  // its first guess (the question's words) misses Italy's record: searched again with the words the record holds
  "r-countries-italy-then-river": ["search", "search", "search"],
};

describe("the oracle on the Qwen library's questions", () => {
  it("writes each question's span after searching each hop (the second for what the first found; again when a first guess missed)", async () => {
    const questions = [...readQuestions("records.jsonl"), ...readQuestions("prose.jsonl")];
    for (const [id, tools] of Object.entries(PICKED)) {
      const q = questions.find((x) => x.id === id);
      expect(q, id).toBeDefined();
      const task = (await questionTask(index, q!))!;
      expect(task, id).toBeDefined();
      const owner = "oracle-test";
      const result = await runTask(
        services.harness,
        owner,
        { task: task.question, policy: "hard" },
        {
          expected: task.answer,
          teacher: (d) =>
            new OracleDriver(d, services.sessions, owner, d.sessionId, {
              fact: { relation: "", entity: "" },
              target: task.target,
            }),
        },
      );
      expect(result.answer, `${id}: ${task.question}`).toBe(task.answer);
      expect(result.stages).toEqual(["plan", "search", "write"]);
      const events = readFileSync(result.traceFile, "utf8")
        .split("\n")
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as { type: string; name?: string; arguments?: { query?: string } });
      const searches = events
        .filter((e) => e.type === "tool_call" && e.name === "search")
        .map((e) => e.arguments?.query);
      expect(searches, id).toEqual(task.target.hops.flatMap((h) => [...(h.tries ?? []), h.query]));
      expect(
        events.filter((e) => e.type === "tool_call").map((e) => e.name),
        id,
      ).toEqual(tools);
    }
  });
});
