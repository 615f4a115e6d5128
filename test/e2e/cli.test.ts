import { execFile } from "node:child_process";
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { metaNumber, metaString, readGgufHeader, sha256File } from "../../src/gguf/index.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { demo } from "../helpers/engine.js";
import { tempDir, tempLibrary, writeLoraVariant } from "../helpers/files.js";
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

  it("merge writes a static merge of the library's adapters and lists it in the manifest; a bad flag fails first", async () => {
    const dir = tempDir("weact-lib-");
    const adapters = ["plan", "search", "write"].map((alias, i) => {
      writeLoraVariant(dir, alias, { seed: 20 + i });
      return { alias, description: `The ${alias} capability.`, file: `${alias}.gguf`, scale: 1 };
    });
    const manifest = join(dir, "manifest.json");
    writeFileSync(manifest, JSON.stringify({ adapters }));
    const config = join(dir, "weact.json");
    writeFileSync(config, JSON.stringify({ model: { demo: "random" }, adapters: { manifest } }));
    const out = join(dir, "static-dare-ties.gguf");
    const merge = (...args: string[]) => ["merge", "--config", config, "--out", out, ...args];
    const listed = () =>
      (JSON.parse(readFileSync(manifest, "utf8")) as { adapters: Record<string, unknown>[] }).adapters;

    // every flag is checked before a tensor is read: the flag, what it may be, and nothing written
    writeFileSync(join(dir, "taken.gguf"), "");
    const refused = [
      [["--method", "svd"], "--method svd: one of linear, ties, dare-ties"],
      [
        ["--method", "linear", "--density", "0.5"],
        "--density 0.5: linear prunes nothing: a density is for ties and dare-ties",
      ],
      [
        ["--method", "ties", "--weights", "1,1"],
        "--weights: 2 weight(s) for 3 adapters (plan, search, write): one each, in that order",
      ],
      [["--method", "ties", "--seed", "3"], "--seed 3: only dare-ties draws at random: a seed is for dare-ties"],
      [
        ["--method", "ties", "--of", "plan,code"],
        '--of: "code" is not an adapter of the library; the library\'s are plan, search, write',
      ],
      [
        ["--method", "ties", "--alias", "plan"],
        '--alias: the manifest\'s adapter "plan" is not a merge, so a merge does not replace it; choose another --alias',
      ],
      [
        ["--method", "ties", "--out", join(dir, "taken.gguf")],
        `--out: ${join(dir, "taken.gguf")} exists; choose a new file`,
      ],
      [
        ["--method", "ties", "--out", join(tempDir(), "m.gguf")],
        expect.stringMatching(
          /^--out: \S+ is outside the adapter folders \(\S+\); write it there or set adapters.allowedDirs$/,
        ),
      ],
    ] as const;
    // one at a time: CLI processes started together on two cores could outlast fails()'s time limit
    const results = [];
    for (const [args] of refused) results.push(await fails(merge(...args)));
    expect(results.map((r) => ({ ...r, stderr: r.stderr.replace(/^weact-mcp: (.*)\n$/s, "$1") }))).toEqual(
      refused.map(([, message]) => ({ code: 2, stderr: message })),
    );
    expect(existsSync(out)).toBe(false);
    expect(listed()).toHaveLength(3);

    const { stdout } = await run(process.execPath, [
      MAIN,
      ...merge("--method", "dare-ties", "--weights", "1,0.5,-0.25"),
    ]);
    expect(stdout).toMatch(
      new RegExp(
        `^merged plan, search, write \\(weights 1, 0.5, -0.25\\) by dare-ties \\(density 0.5, seed 0\\) into ${out} \\(rank 4, 28 targets, F32, sha256 [0-9a-f]{64}\\); "static-dare-ties" added to ${manifest}\n$`,
      ),
    );
    const entry = {
      alias: "static-dare-ties",
      file: "static-dare-ties.gguf",
      scale: 1,
      merge: { method: "dare-ties", density: 0.5, weights: [1, 0.5, -0.25], seed: 0, of: ["plan", "search", "write"] },
    };
    expect(listed()).toEqual([
      ...adapters,
      { ...entry, description: expect.stringContaining("policy static:dare-ties runs it") },
    ]);
    const header = readGgufHeader(out);
    expect(metaString(header, "general.name")).toBe("static-dare-ties");
    expect(metaNumber(header, "adapter.lora.alpha")).toBe(4);
    expect(header.tensors.map((t) => t.name)).toEqual(
      readGgufHeader(join(dir, "plan.gguf")).tensors.map((t) => t.name),
    );

    // made again with other settings: the entry is replaced in place, its file too
    const first = await sha256File(out);
    const again = await run(process.execPath, [
      MAIN,
      ...merge("--method", "dare-ties", "--density", "1", "--seed", "7"),
    ]);
    expect(again.stdout).toContain(`"static-dare-ties" replaced in ${manifest}`);
    expect(await sha256File(out)).not.toBe(first);
    expect(listed()).toEqual([
      ...adapters,
      { ...entry, merge: { ...entry.merge, density: 1, seed: 7, weights: [1, 1, 1] }, description: expect.any(String) },
    ]);
    // a static merge is no stage of a workflow, and static:METHOD needs a merge by that method
    const stages = await Promise.all([
      fails(["run", "a task", "--config", config, "--workflow", "plan,static-dare-ties"]),
      fails(["run", "a task", "--config", config, "--policy", "static:ties"]),
    ]);
    expect(stages).toEqual([
      {
        code: 2,
        stderr:
          'weact-mcp: --workflow: "static-dare-ties" is a static merge, not a capability a stage loads (plan, search, write)\n',
      },
      {
        code: 2,
        stderr:
          "weact-mcp: --policy: the library has no ties merge for static:ties; make one with `weact-mcp merge --method ties --out FILE.gguf`\n",
      },
    ]);
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
    const report = JSON.parse(readFileSync(join(out, "report.json"), "utf8")) as {
      policies: { policy: string }[];
      weights: { base: { sha256: string }; adapters: { alias: string; file: string; sha256: string }[] };
    };
    expect(report.policies.map((p) => p.policy)).toEqual([
      "base",
      ...adapters.map((a) => `single:${a.alias}`),
      "static",
      "hard",
      "soft",
    ]);
    // the weights it ran on, each by its content: the adapters that loaded, not the broken entry
    expect(report.weights.base.sha256).toBe(await sha256File(demo.model));
    expect(report.weights.adapters.map((a) => a.alias)).toEqual(adapters.map((a) => a.alias));
    for (const a of report.weights.adapters) expect(a.sha256).toBe(await sha256File(a.file));
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
