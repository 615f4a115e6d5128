import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { BuildProgress, runWithProgress } from "../../testkit/buildProgress.js";
import { tempDir } from "../helpers/files.js";

/**
 * The llama-server build `npm test` runs on a machine without one takes about 16 minutes: too long for a test. These
 * check the progress it prints instead: the line format from cmake's own log, and the runner on a stand-in script
 * that logs like a build, at a shorter interval.
 */
describe("build progress", () => {
  it("a status line carries the build's latest step and percentage (make or ninja) and the time so far", () => {
    const p = new BuildProgress("llama-server build", 0);
    expect(p.line(2_000)).toBe("llama-server build: starting (2 s)\n");
    p.feed("-- Detecting CXX compiler ABI info\n-- Configuring do");
    expect(p.line(5_000)).toBe("llama-server build: -- Detecting CXX compiler ABI info (5 s)\n");
    // the rest of a line split across chunks, then make's steps
    p.feed("ne\n[  3%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o\n");
    p.feed("[ 45%] Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o\r\n");
    expect(p.line(754_000)).toBe(
      "llama-server build: 45% Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o (12 min 34 s)\n",
    );
    p.feed("[100%] Linking CXX executable ../../bin/llama-server\n");
    expect(p.line(1_800_000)).toBe(
      "llama-server build: 100% Linking CXX executable ../../bin/llama-server (30 min 0 s)\n",
    );
    expect(p.done(1_801_000)).toBe("llama-server build: done in 30 min 1 s\n");

    const ninja = new BuildProgress("b", 0);
    ninja.feed("[123/456] Building CXX object common/CMakeFiles/common.dir/arg.cpp.o\n");
    expect(ninja.line(0)).toBe("b: 26% Building CXX object common/CMakeFiles/common.dir/arg.cpp.o (0 s)\n");
  });

  it("the runner prints an intro, then one status line per interval rather than the log, and returns stdout", async () => {
    const script = join(tempDir(), "build.sh");
    // 40 log lines over about 1.2 s, then the folder on stdout, as scripts/llama-cpp-build.sh does
    writeFileSync(
      script,
      'for i in $(seq 1 40); do echo "[ $((i * 100 / 40))%] Building CXX object step$i.o" >&2; sleep 0.03; done\necho /built/bin\n',
    );
    const lines: string[] = [];
    const started = Date.now();
    const stdout = await runWithProgress("bash", [script], {
      label: "test build",
      intro: "building the test target",
      everyMs: 400,
      write: (text) => lines.push(text),
    });
    const intervals = Math.floor((Date.now() - started) / 400);
    expect(stdout).toBe("/built/bin\n");
    expect(lines[0]).toBe("building the test target\n");
    expect(lines.at(-1)).toMatch(/^test build: done in \d+ s\n$/);
    const status = lines.slice(1, -1);
    // one line per elapsed interval, not one per log line
    expect(status.length).toBeGreaterThanOrEqual(1);
    expect(status.length).toBeLessThanOrEqual(intervals);
    for (const line of status) expect(line).toMatch(/^test build: \d+% Building CXX object step\d+\.o \(\d+ s\)\n$/);
  });

  it("a build that logs nothing (already cached) prints nothing; a failed one throws with the end of its log", async () => {
    const lines: string[] = [];
    const write = (text: string) => void lines.push(text);
    await expect(
      runWithProgress("bash", ["-c", "echo /cached/bin"], { label: "b", intro: "building", write }),
    ).resolves.toBe("/cached/bin\n");
    expect(lines).toEqual([]);
    await expect(
      runWithProgress("bash", ["-c", "echo 'cmake: no compiler found' >&2; exit 3"], {
        label: "b",
        intro: "building",
        write,
      }),
    ).rejects.toThrow(/failed \(3\):\ncmake: no compiler found/);
  });
});
