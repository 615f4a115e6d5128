import { execFile } from "node:child_process";
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { sha256File } from "../../src/gguf/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { demo } from "../helpers/engine.js";
import { tempDir, tempLibrary } from "../helpers/files.js";
import { connectClient } from "../../testkit/mcpClient.js";
import { call, MAIN, testConfig } from "../helpers/server.js";

const run = promisify(execFile);

/** The CLI's exit code and stderr, logging at info: a model that loaded would say so there. */
async function fails(args: string[]): Promise<{ code: number; stderr: string }> {
  const err = await run(process.execPath, [MAIN, ...args], {
    timeout: 20_000,
    env: { ...process.env, WEACT_LOG_LEVEL: "info" },
  }).then(
    () => undefined,
    (e: { code: number; stderr: string }) => e,
  );
  if (!err) throw new Error(`weact-mcp ${args.join(" ")} succeeded`);
  return { code: err.code, stderr: err.stderr };
}

describe("the command line", () => {
  it("-h/--help lists the serving flags and exits at once, loading nothing", async () => {
    {
      const { stdout, stderr } = await run(process.execPath, [MAIN, "-h"], { timeout: 20_000 });
      expect(stdout).toMatch(/^weact-mcp: serve one GGUF base model/);
      for (const option of [
        "--stdio",
        "--http PORT",
        "--host H",
        "--token-file F",
        "--config FILE",
        "--model PATH",
        "--adapters PATH",
        "-h, --help",
      ])
        expect(stdout).toContain(option);
      for (const command of [
        'run "TASK"',
        "eval TASKS.jsonl",
        "import-peft DIR",
        "export --capability ALIAS",
        "demo-weights",
      ])
        expect(stdout).toContain(command);
      // the documents it points to are there (it once named README sections that had moved to docs/)
      for (const [doc] of stdout.matchAll(/docs\/[\w-]+\.md/g)) expect(existsSync(join(PACKAGE_ROOT, doc))).toBe(true);
      expect(stdout).not.toContain('README "');
      expect(stderr).toBe(""); // no model was loaded: nothing logged
    }
  });

  it("`npx weact-mcp`, the way README runs the command line, starts this package's CLI in the clone", async () => {
    // npm_config_yes=false: never install a package of that name from the registry instead
    const { stdout } = await run("npx", ["weact-mcp", "--help"], {
      cwd: PACKAGE_ROOT,
      env: { ...process.env, npm_config_yes: "false" },
      timeout: 30_000,
    });
    expect(stdout).toMatch(/^weact-mcp: serve one GGUF base model/);
  });

  it("eval on a missing tasks file names the argument, the path and what to give instead", async () => {
    const missing = join(tempDir(), "missing.jsonl");
    const { code, stderr } = await fails(["eval", missing, "--config", testConfig()]);
    expect(code).toBe(2);
    expect(stderr).toBe(
      `weact-mcp: the tasks file (eval TASKS.jsonl) ${missing} does not exist: give the path of a JSONL file with one {"task", "answer"} object per line, such as models/trained/eval-tasks.jsonl\n`,
    );
  });

  it("a --policy or --workflow value the library cannot run fails with the allowed values, loading nothing", async () => {
    const config = testConfig();
    const tasks = join(tempDir(), "tasks.jsonl");
    writeFileSync(tasks, `${JSON.stringify({ task: "Which river flows through Paris?", answer: "Seine" })}\n`);
    const policies = "hard, soft, base, static, single:plan, single:search, single:write";
    const cases = [
      [
        ["eval", tasks, "--policy", "hard,sfot"],
        `--policy: "sfot" is not one of ${policies} (single:ALIAS names an adapter of the library, adapters.manifest)`,
      ],
      [
        ["run", "a task", "--policy", "single:code"],
        `--policy: "single:code" is not one of ${policies} (single:ALIAS names an adapter of the library, adapters.manifest)`,
      ],
      [
        ["run", "a task", "--workflow", "plan,serch,write"],
        '--workflow: "serch" is not an adapter of the library (plan, search, write; adapters.manifest)',
      ],
    ] as const;
    const results = await Promise.all(cases.map(([args]) => fails([...args, "--config", config])));
    // the one line and nothing else: at info level, a model or tool that started would have logged
    expect(results).toEqual(cases.map(([, message]) => ({ code: 2, stderr: `weact-mcp: ${message}\n` })));
  });

  it("eval without --policy runs every adapter that loaded: a broken manifest entry is left out, not the whole eval", async () => {
    const lib = tempLibrary();
    const { adapters } = JSON.parse(readFileSync(lib.manifest, "utf8")) as { adapters: { alias: string }[] };
    writeFileSync(join(lib.dir, "broken.gguf"), "not a GGUF file");
    const entry = { alias: "broken", description: "An adapter whose file is not a GGUF.", file: "broken.gguf" };
    writeFileSync(lib.manifest, JSON.stringify({ adapters: [...adapters, entry] }));
    const config = testConfig({
      adapters: { manifest: lib.manifest },
      harness: { maxTokensPerTurn: 4, stage: { turns: 1 }, workflow: ["plan"] },
    });
    const tasks = join(tempDir(), "tasks.jsonl");
    writeFileSync(tasks, `${JSON.stringify({ task: "Which river flows through Paris?", answer: "Seine" })}\n`);
    const out = join(tempDir(), "eval");
    await run(process.execPath, [MAIN, "eval", tasks, "--out", out, "--config", config, "--seed", "1"], {
      timeout: 120_000,
      env: { ...process.env, WEACT_LOG_LEVEL: "warn" },
    });
    const report = JSON.parse(readFileSync(join(out, "report.json"), "utf8")) as { policies: { policy: string }[] };
    expect(report.policies.map((p) => p.policy)).toEqual([
      "base",
      ...adapters.map((a) => `single:${a.alias}`),
      "static",
      "hard",
      "soft",
    ]);
  }, 120_000);

  it("--model and --adapters override the config file: the server runs that model file and that library", async () => {
    const model = join(tempDir(), "my-base.gguf");
    copyFileSync(demo.model, model);
    // a library folder with two of the three demo capabilities; the config names another (full) manifest
    const lib = tempLibrary();
    writeFileSync(
      lib.manifest,
      JSON.stringify({
        adapters: [
          { alias: "plan", description: "Planning from the --adapters folder.", file: "plan.gguf" },
          { alias: "search", description: "Search from the --adapters folder.", file: "search.gguf" },
        ],
      }),
    );
    const { client, close } = await connectClient("stdio", {
      serverArgs: ["--config", testConfig(), "--model", model, "--adapters", lib.dir],
    });
    try {
      const listing = await call<{
        base_model: { file: string; sha256: string };
        adapters: { alias: string; description: string; file: string; resident: boolean }[];
      }>(client, "list_adapters");
      expect(listing.base_model).toMatchObject({ file: model, sha256: await sha256File(demo.model) });
      expect(listing.adapters.map((a) => [a.alias, a.description, a.file, a.resident])).toEqual([
        ["plan", "Planning from the --adapters folder.", lib.file("plan"), true],
        ["search", "Search from the --adapters folder.", lib.file("search"), true],
      ]);
    } finally {
      await close();
    }
  });
});
