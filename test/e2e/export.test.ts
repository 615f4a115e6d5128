import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { parseExportCommand, runExport, ExportUsageError } from "../../src/export/exportCommand.js";
import { toAxolotl, toOpenAI, toTrl, type ModelFunctions } from "../../src/export/convert.js";
import { exportDataset, formatProblem } from "../../src/export/exportDataset.js";
import { parseFilter } from "../../src/export/filter.js";
import {
  LINE_SCHEMAS,
  type AxolotlLine,
  type ChatMessage,
  type ExportFormat,
  type OpenAILine,
  type TrlLine,
} from "../../src/export/formats.js";
import { readTraces, TraceSourceError } from "../../src/export/readTraces.js";
import { segment, type StageSample } from "../../src/export/segment.js";
import { BASE_CAPABILITY, ManifestEntrySchema } from "../../src/library/manifest.js";
import { datasetStats, formatStats, type TokenCounter } from "../../src/export/stats.js";
import type { Trajectory } from "../../src/export/recordedTrajectory.js";
import { elisionMarker, toConversation, type AssistantMessage, type ToolMessage } from "../../src/sessions/history.js";
import { PlainReference } from "../../src/engines/local/localTesting.js";
import { demo, TEST_THREADS } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";
import { call, connectClient, MAIN, testConfig } from "../helpers/server.js";

/** The random demo model rarely ends a string argument on its own; a bias on the quote token makes it. */
const Q = { '"': 8 };
const CAPABILITIES = ["plan", "search", "write"];
const FORMATS: ExportFormat[] = ["axolotl", "openai", "trl"];
/** Stand-in for the engine's tokenizer: the demo vocabulary is byte-level, so bytes bound its token counts. */
const countBytes: TokenCounter = (text) => Buffer.byteLength(text);
const FUNCTIONS: ModelFunctions = {
  load_lora: {
    description: "Activate one capability adapter.",
    parameters: { type: "object", properties: { adapter: { type: "string", enum: CAPABILITIES } } },
  },
  search: {
    description: "Search the corpus.",
    parameters: { type: "object", properties: { query: { type: "string" } } },
  },
};

interface Event {
  type: string;
  [k: string]: unknown;
}
interface Run {
  file: string;
  events: Event[];
  trajectory: Trajectory;
}

const traceDir = join(tempDir(), "traces");
const work = tempDir("weact-export-");
let hard: Run;
let soft: Run;

const readEvents = (file: string) =>
  readFileSync(file, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Event);
const readLines = (file: string) =>
  readFileSync(file, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as unknown);
const writeEvents = (file: string, events: Event[]) =>
  writeFileSync(file, events.map((e) => `${JSON.stringify(e)}\n`).join(""));

beforeAll(async () => {
  // keep_tool_result 1: the search stage's second result turns the first into a marker mid-stage
  const config = testConfig({
    model: { gpu: false, contextSize: 8192 },
    sessions: { keepToolResults: 1 },
    harness: { maxTokensPerTurn: 96, traceDir, stage: { turns: 3 } },
  });
  const c = await connectClient("stdio", undefined, {}, config);
  const ids: string[] = [];
  try {
    const searchTwiceThenExit = [
      { adapter: "search", turn: 1, tool: "search", bias: Q },
      { adapter: "search", turn: 2, tool: "search", bias: Q },
      { adapter: "search", turn: 3, tool: "offload_lora", bias: Q },
    ];
    const long = { timeout: 300_000 };
    const budgets = { noToolTurns: 1 }; // a stage without tool calls ends after one turn (the harness releases it)
    ids.push(
      (
        await call<{ trace_id: string }>(
          c.client,
          "run_task",
          { task: "Which river flows through Paris?", policy: "hard", seed: 1, steering: searchTwiceThenExit, budgets },
          long,
        )
      ).trace_id,
    );
    ids.push(
      (
        await call<{ trace_id: string }>(
          c.client,
          "run_task",
          {
            task: "Which river flows through Paris?",
            policy: "soft",
            seed: 3,
            steering: [{ adapter: "base", turn: 1, tool: "load_lora" }],
            soft: { turns: 3, switches: 4 },
            budgets,
          },
          long,
        )
      ).trace_id,
    );
  } finally {
    await c.close();
  }
  const { trajectories, problems } = readTraces(traceDir);
  expect(problems).toEqual([]);
  [hard, soft] = ids.map((id) => {
    const trajectory = trajectories.find((t) => t.id === id)!;
    return { file: trajectory.file, events: readEvents(trajectory.file), trajectory };
  }) as [Run, Run];
}, 300_000);

/** The model turns each stage of `capability` took, from the trace's own events (not from the history). */
function stagesFromEvents(run: Run, capability: string) {
  const loads = run.events.filter(
    (e) => e.type === "adapter_control" && e.action === "load" && e.ok && e.active === capability,
  );
  return loads.map((load) => ({
    callIds: run.events
      .filter((e) => e.type === "model_call" && e.stage === load.stage)
      .map((e) => (e.calls as { id: string }[]).map((c) => c.id)),
    releasedBy: run.events.find((e) => e.type === "adapter_control" && e.action === "offload" && e.stage === load.stage)
      ?.author,
  }));
}

/** Identifies an assistant turn across formats: its text and its calls' ids. */
const turnKey = (content: string, callIds: readonly string[]) => JSON.stringify([content, ...callIds]);
const historyKey = (m: AssistantMessage) =>
  turnKey(
    m.content,
    m.toolCalls.map((c) => c.id),
  );
const chatKey = (m: ChatMessage) =>
  m.role === "assistant"
    ? turnKey(
        m.content,
        (m.tool_calls ?? []).map((c) => c.id),
      )
    : `${m.role} message`;

/** Every assistant turn a capability's adapter wrote itself, in both runs. */
function ownTurns(capability: string): Set<string> {
  const weights = capability === BASE_CAPABILITY ? null : capability;
  const turns = [hard, soft]
    .flatMap((r) => r.trajectory.messages)
    .filter((m) => m.role === "assistant" && m.author === "model" && m.adapter === weights);
  return new Set(turns.map((m) => historyKey(m as AssistantMessage)));
}

/** The messages of each line a format trains on. */
function trainedMessages(format: ExportFormat, line: unknown): ChatMessage[] {
  if (format === "axolotl") return (line as AxolotlLine).messages.filter((m) => m.training) as ChatMessage[];
  if (format === "openai")
    return (line as OpenAILine).messages.filter((m) => m.role === "assistant" && m.weight === 1) as ChatMessage[];
  return (line as TrlLine).completion;
}

function exportTo(format: ExportFormat, capability: string, from: string | string[], filter = "all") {
  const out = join(work, `${capability}-${format}-${Math.random().toString(36).slice(2)}.jsonl`);
  const summary = exportDataset({
    from,
    capability,
    filter: parseFilter(filter),
    format,
    out,
    countTokens: countBytes,
    functionsOf: () => FUNCTIONS,
  });
  return { summary, out, lines: readLines(out) };
}

describe("segmentation of real runs", () => {
  it("gives one sample per stage occurrence, whose targets are exactly the adapter's own turns plus its own exit call", () => {
    let stages = 0;
    for (const run of [hard, soft]) {
      for (const capability of CAPABILITIES) {
        const samples = segment(run.trajectory, capability);
        const expected = stagesFromEvents(run, capability);
        expect(samples).toHaveLength(expected.length);
        samples.forEach((s, n) => {
          stages++;
          const targets = s.targets.map((t) => s.messages[t]!);
          expect(targets.every((m) => m.role === "assistant" && m.author === "model" && m.adapter === capability)).toBe(
            true,
          );
          expect(targets).toHaveLength(expected[n]!.callIds.length);
          expect(targets.flatMap((m) => (m.role === "assistant" ? m.toolCalls.map((c) => c.id) : []))).toEqual(
            expected[n]!.callIds.flat(),
          );
          // the exit call is a target exactly when the adapter made it; the sample ends with its last target
          expect(s.exit).toBe(expected[n]!.releasedBy);
          const last = targets.at(-1)! as AssistantMessage;
          expect(last.toolCalls.some((c) => c.name === "offload_lora")).toBe(s.exit === "model");
          expect(s.messages).toHaveLength(s.targets.at(-1)! + 1);
          // the context ends with the load exchange: the call, then its activation result
          const [loadCall, activation] = s.messages.slice(s.contextLength - 2, s.contextLength);
          expect(loadCall).toMatchObject({
            role: "assistant",
            toolCalls: [{ name: "load_lora", arguments: { adapter: capability } }],
          });
          expect(activation).toMatchObject({
            role: "tool",
            name: "load_lora",
            isError: false,
            callId: (loadCall as { toolCalls: { id: string }[] }).toolCalls[0]!.id,
          });
          expect(s.targets[0]).toBeGreaterThanOrEqual(s.contextLength);
        });
      }
    }
    expect(stages).toBeGreaterThanOrEqual(4);
    // the soft run's base chose the capability with its own call: context, never a target
    const softLoad = soft.trajectory.messages.find(
      (m) => m.role === "assistant" && m.toolCalls.some((c) => c.name === "load_lora"),
    );
    expect(softLoad).toMatchObject({ author: "model", adapter: null });
  });

  it("records the capabilities a hard run's prompt listed (its workflow's); a soft run lists every one and records none", () => {
    // what the export renders a hard run's lines with, whatever the library holds when it exports them
    expect(hard.trajectory.capabilities).toEqual(CAPABILITIES);
    expect(soft.trajectory.capabilities).toBeUndefined();
  });

  it("gives the base one sample per trajectory: its own turns are the targets, the adapters' stages between them context", () => {
    for (const run of [hard, soft]) {
      const history = run.trajectory.messages;
      const own = history.flatMap((m, i) =>
        m.role === "assistant" && m.author === "model" && m.adapter === null ? [i] : [],
      );
      const samples = segment(run.trajectory, BASE_CAPABILITY);
      if (!own.length) {
        expect(samples).toEqual([]);
        continue;
      }
      expect(samples).toHaveLength(1);
      const [s] = samples as [StageSample];
      expect(s.targets).toEqual(own);
      expect(s.contextLength).toBe(own[0]);
      expect(s.messages).toEqual(history.slice(0, own.at(-1)! + 1));
    }
    // the soft run's base chose the capability with its own call: the base's target
    const [softBase] = segment(soft.trajectory, BASE_CAPABILITY) as [StageSample];
    const first = softBase.messages[softBase.targets[0]!] as AssistantMessage;
    expect(first.toolCalls.map((c) => c.name)).toEqual(["load_lora"]);
    // so no adapter may take the base's name
    const entry = ManifestEntrySchema.safeParse({ alias: BASE_CAPABILITY, description: "d", file: "base.gguf" });
    expect(entry.success ? "" : entry.error.issues.map((i) => i.message).join()).toMatch(
      /alias "base" names the base model/,
    );
  });

  it("renders every target with the tool results as the model read them then (keep_tool_result, the server's marker)", () => {
    const [search] = segment(hard.trajectory, "search") as [StageSample];
    expect(search.keepToolResult).toBe(1);
    expect(search.targets).toHaveLength(3); // search, search, offload_lora
    const results = search.messages.filter((m): m is ToolMessage => m.role === "tool" && !m.internal);
    expect(results).toHaveLength(2);
    const marker = elisionMarker(results[0]!, 1);
    // the results of the search calls (OpenAI's tool messages carry only the call id)
    const contents = (
      messages: readonly {
        role: string;
        content: string;
        tool_call_id?: string;
        tool_calls?: { id: string; function: { name: string } }[];
      }[],
    ) => {
      const searches = new Set(
        messages.flatMap((m) => (m.tool_calls ?? []).filter((c) => c.function.name === "search").map((c) => c.id)),
      );
      return messages.filter((m) => m.role === "tool" && searches.has(m.tool_call_id!)).map((m) => m.content);
    };

    // TRL: the second search read the first result verbatim, the exit call read it as a marker
    const trl = toTrl(search);
    expect(trl.map((l) => contents(l.prompt))).toEqual([[], [results[0]!.content], [marker, results[1]!.content]]);
    // the same as the server's own rendering of that prefix
    const exitAt = search.targets[2]!;
    const served = toConversation(search.messages.slice(0, exitAt), {}, 1).turns.flatMap((t) =>
      t.role === "assistant" ? (t.calls ?? []).filter((c) => c.name === "search").map((c) => c.result) : [],
    );
    expect(served).toEqual([marker, results[1]!.content]);

    // whole sequences: one per elision, the earlier targets context in the later one
    for (const lines of [toAxolotl(search), toOpenAI(search)]) {
      expect(lines).toHaveLength(2);
      expect(contents(lines[0]!.messages)).toEqual([results[0]!.content]);
      expect(contents(lines[1]!.messages)).toEqual([marker, results[1]!.content]);
    }
    expect(toAxolotl(search).map((l) => l.messages.filter((m) => m.training).length)).toEqual([2, 1]);
  });
});

describe("export formats", () => {
  it("every line parses with its strict schema; only the capability's own turns are trained, each of them once", () => {
    for (const format of FORMATS) {
      for (const capability of [...CAPABILITIES, BASE_CAPABILITY]) {
        const { summary, lines } = exportTo(format, capability, [hard.file, soft.file]);
        expect(summary.problems).toEqual([]);
        expect(lines).toHaveLength(summary.lines);
        const trained: string[] = [];
        for (const line of lines) {
          expect(() => LINE_SCHEMAS[format].parse(line)).not.toThrow();
          const own = trainedMessages(format, line);
          expect(own.length).toBeGreaterThan(0);
          for (const m of own) expect(m.role).toBe("assistant");
          trained.push(...own.map(chatKey));
          expect((line as { tools: unknown[] }).tools).toHaveLength(2);
        }
        expect(trained.every((k) => ownTurns(capability).has(k))).toBe(true);
        expect(new Set(trained)).toEqual(ownTurns(capability));
        expect(trained).toHaveLength(ownTurns(capability).size);
      }
    }
  });

  it("the schemas are strict: an unknown key, a trained tool result or a dangling result is refused", () => {
    const sample = segment(hard.trajectory, "search")[0]!;
    const [axolotl] = toAxolotl(sample);
    const [openai] = toOpenAI(sample);
    const [trl] = toTrl(sample);
    expect(LINE_SCHEMAS.axolotl.safeParse({ ...axolotl, extra: 1 }).success).toBe(false);
    expect(
      LINE_SCHEMAS.openai.safeParse({ ...openai, messages: openai!.messages.map((m) => ({ ...m, training: true })) })
        .success,
    ).toBe(false);
    const trainedResult = axolotl!.messages.map((m) => (m.role === "tool" ? { ...m, training: true } : m));
    expect(LINE_SCHEMAS.axolotl.safeParse({ ...axolotl, messages: trainedResult }).success).toBe(false);
    const dangling = trl!.prompt.filter((m) => m.role !== "assistant");
    expect(LINE_SCHEMAS.trl.safeParse({ ...trl, prompt: dangling }).error?.issues[0]?.message).toBe(
      "answers no earlier tool call",
    );
  });

  it("tool calls keep the OpenAI structure, internal and external alike, with JSON string arguments", () => {
    const [line] = toOpenAI(segment(hard.trajectory, "search")[0]!);
    const calls = line!.messages.flatMap((m) => (m.role === "assistant" ? (m.tool_calls ?? []) : []));
    expect(new Set(calls.map((c) => c.function.name))).toEqual(new Set(["load_lora", "offload_lora", "search"]));
    for (const c of calls)
      expect(c).toMatchObject({
        id: expect.stringMatching(/^call_/),
        type: "function",
        function: { arguments: expect.stringMatching(/^\{.*\}$/) },
      });
    expect(calls.find((c) => c.function.name === "load_lora")!.function.arguments).toBe('{"adapter": "plan"}');
    const results = line!.messages.filter((m) => m.role === "tool");
    expect(results.every((r) => calls.some((c) => c.id === (r as { tool_call_id: string }).tool_call_id))).toBe(true);
  });
});

describe("filters, duplicates and broken traces", () => {
  const judged = join(work, "judged");
  const judgedCopy = (name: string, correct: { exact: boolean; contains: boolean }) =>
    writeEvents(
      join(judged, `${name}.jsonl`),
      hard.events.map((e) => (e.type === "answer" ? { ...e, correct } : e)),
    );

  it("--filter correct keeps only the trajectories judged correct; identical lines are written once", () => {
    mkdirSync(judged);
    judgedCopy("t_judgedRight", { exact: false, contains: true });
    judgedCopy("t_judgedWrong", { exact: false, contains: false });
    const alone = exportTo("axolotl", "search", [hard.file]);
    const correct = exportTo("axolotl", "search", judged, "correct");
    expect(correct.summary.trajectories).toEqual({ read: 2, selected: 1 });
    expect(correct.lines).toEqual(alone.lines);

    const ids = join(work, "ids.txt");
    writeFileSync(ids, "# keep these\nt_judgedWrong\n\n");
    expect(exportTo("axolotl", "search", judged, ids).summary.trajectories).toEqual({ read: 2, selected: 1 });

    const all = exportTo("axolotl", "search", judged);
    expect(all.summary.trajectories).toEqual({ read: 2, selected: 2 });
    expect(all.lines).toEqual(alone.lines);
    expect(all.summary.duplicates).toBe(alone.lines.length);
    expect(all.summary.samples).toBe(1);
  });

  it("a truncated or malformed trace is reported by file and line, and the export goes on with the rest", () => {
    const broken = join(work, "broken");
    mkdirSync(broken, { recursive: true });
    const hardText = readFileSync(hard.file, "utf8");
    const cut = join(broken, "t_cutMidHistory.jsonl");
    writeFileSync(cut, hardText.slice(0, hardText.indexOf('"type":"history"') + 200));
    const cutLine = hardText.slice(0, hardText.indexOf('"type":"history"')).split("\n").length;
    const garbled = join(broken, "t_garbledLine.jsonl");
    const softLines = readFileSync(soft.file, "utf8").split("\n");
    writeFileSync(garbled, [...softLines.slice(0, 2), '{"type":"model_call","t":1', ...softLines.slice(2)].join("\n"));
    writeFileSync(join(broken, "t_intact.jsonl"), hardText);

    const write = exportDataset({
      from: broken,
      capability: "write",
      filter: parseFilter("all"),
      format: "openai",
      out: join(work, "broken.jsonl"),
      countTokens: countBytes,
    });
    expect(write.problems.map((p) => ({ file: p.file, line: p.line }))).toEqual([
      { file: cut, line: cutLine },
      { file: cut, line: undefined },
      { file: garbled, line: 3 },
    ]);
    expect(formatProblem(write.problems[0]!)).toBe(`${cut}:${cutLine}: not JSON (the trace was cut off mid-write?)`);
    expect(write.problems[1]!.message).toMatch(/^no intact history event .*; skipped$/);
    expect(write.trajectories).toEqual({ read: 2, selected: 2 });
    expect(write.lines).toBeGreaterThan(0);
    expect(readLines(join(work, "broken.jsonl"))).toHaveLength(write.lines);
    expect(() => readTraces(join(work, "nowhere"))).toThrow(TraceSourceError);
  });
});

describe("stats and the command", () => {
  it("reports per-capability sample counts and context/target token lengths", () => {
    const runs = [hard, soft];
    const bytes = datasetStats(
      runs.map((r) => r.trajectory),
      countBytes,
    );
    expect(bytes.map((s) => s.capability)).toEqual([BASE_CAPABILITY, ...CAPABILITIES]);
    for (const s of bytes) expect(s.context.mean).toBeGreaterThan(s.target.mean);
    // one token per message: the context is the messages before the first target, the targets their count
    for (const s of datasetStats(
      runs.map((r) => r.trajectory),
      () => 1,
    )) {
      const samples = runs.flatMap((r) => segment(r.trajectory, s.capability));
      expect(s.samples).toBe(samples.length);
      expect(s.context.p95).toBe(Math.max(...samples.map((x) => x.targets[0]!)));
      expect(s.target.mean).toBeCloseTo(samples.reduce((n, x) => n + x.targets.length, 0) / samples.length);
    }
  });

  it("runs from flags: usage errors before any work, the summary and the stats table on stdout, problems on stderr", () => {
    expect(() => parseExportCommand({})).toThrow(ExportUsageError);
    expect(() => parseExportCommand({ capability: "search", format: "csv" })).toThrow(/format/);
    const out: string[] = [];
    const err: string[] = [];
    const sink = (to: string[]) => ({ write: (s: string) => to.push(s) });
    const deps = { traceDir, countTokens: countBytes };
    runExport(
      parseExportCommand({ capability: "search", out: join(work, "cli-search.jsonl") }),
      deps,
      sink(out),
      sink(err),
    );
    expect(out.join("")).toMatch(
      /^search: [1-9]\d* samples, [1-9]\d* axolotl lines -> .*cli-search\.jsonl\ntrajectories: 2 read, 2 selected \(filter: all\)\nstage exits: model [1-9]/,
    );
    expect(readLines(join(work, "cli-search.jsonl")).length).toBeGreaterThan(0);
    runExport(parseExportCommand({ stats: true }), deps, sink(out), sink(err));
    expect(out.at(-1)).toMatch(/^capability\s+samples\s+context mean\s+context p95\s+target mean\s+target p95\n-+/);
    expect(out.at(-1)).toMatch(/^search\s+[1-9]/m);
    expect(err).toEqual([]);
  });

  it("the command counts tokens with the model's own tokenizer, not bytes", async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [MAIN, "export", "--stats", "--from", traceDir, "--config", testConfig()],
      { env: { ...process.env, WEACT_LOG_LEVEL: "warn" } },
    );
    // the tokenizer of the model file itself, loaded by plain node-llama-cpp (no weact code on that path)
    const reference = await PlainReference.load({ modelPath: demo.model, threads: TEST_THREADS, contextSize: 512 });
    try {
      const trajectories = [hard, soft].map((r) => r.trajectory);
      const tokens: TokenCounter = (text) => reference.tokenize(text).length;
      expect(stdout).toBe(`${formatStats(datasetStats(trajectories, tokens))}\n`);
      expect(stdout).not.toBe(`${formatStats(datasetStats(trajectories, countBytes))}\n`); // the demo vocabulary merges: fewer tokens than bytes
    } finally {
      await reference.dispose();
    }
  });
});
