import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULT_CORPUS, PACKAGE_ROOT } from "../../src/paths.js";
import { PROGRESS_EVERY_MS } from "../../testkit/buildProgress.js";
import { TRAINING_ENTITIES } from "../../training/pipeline/paths.js";
import { factAsked, firstScreen, readme, sdkExample } from "../helpers/readme.js";

/** What the README promises a newcomer, held to the files it describes. (Its SDK example runs in trained-demo.) */
describe("README", () => {
  it("its first screen says what the trained demo answers: the question form, the corpus and its kinds", () => {
    const screen = firstScreen();
    expect(screen).toContain('"What is the <relation> of <entity>?"');
    const documents = readdirSync(join(DEFAULT_CORPUS, "entities")).flatMap((f) =>
      readFileSync(join(DEFAULT_CORPUS, "entities", f), "utf8")
        .trim()
        .split("\n"),
    );
    expect(screen).toContain(`the ${documents.length} entity documents of its search corpus`);
    for (const kind of readdirSync(TRAINING_ENTITIES).map((f) => f.replace(/\.json$/, "")))
      expect(screen).toContain(kind);
    // every example it gives in that form asks for a fact the corpus holds, with the value it states
    const examples = [...screen.matchAll(/"(What is the [^"<]+\?)" (?:gets )?([^,:"]+)/g)];
    expect(examples.length).toBeGreaterThan(0);
    for (const [, question, answer] of examples) expect(answer!.trim()).toBe(factAsked(question!).value);
  });

  it("its SDK example asks a question of the demo's corpus and says it prints the value the corpus states", () => {
    const { task } = sdkExample();
    expect(readme()).toContain(`it prints \`${factAsked(task).value}\``);
  });

  it("runs the command line as `npx <the package's bin>`, never through a path into dist/", () => {
    const bin = Object.keys(
      (JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { bin: object }).bin,
    );
    expect(bin).toEqual(["weact-mcp"]);
    const text = readme();
    expect(text).not.toMatch(/node dist\/src\/cli\/main\.js/);
    const commands = text.split("\n").filter((l) => /^npx weact-mcp\b/.test(l.trim()) || /`npx weact-mcp\b/.test(l));
    expect(commands.length).toBeGreaterThanOrEqual(4);
  });

  it("gives the cold llama-server build time of the first `npm test`, as the build script says it, and its cache", () => {
    const script = readFileSync(join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), "utf8");
    const minutes = /\(about (\d+) minutes on 2 cores, once per machine\)/.exec(script)?.[1];
    expect(minutes).toBeDefined();
    expect(script).toContain("${XDG_CACHE_HOME:-$HOME/.cache}/weact-mcp/llama.cpp");
    const screen = firstScreen();
    expect(screen).toMatch(
      new RegExp(
        `first \`npm test\`\\s+also builds llama-server[\\s\\S]{0,200}?, about ${minutes}\\s+minutes on 2 cores`,
      ),
    );
    expect(screen).toContain(`progress line every ${PROGRESS_EVERY_MS / 1000} s`);
    expect(screen).toContain("`~/.cache/weact-mcp`");
  });
});
