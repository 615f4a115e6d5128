import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readTaskFile, TaskFileError } from "../../src/harness/eval/TaskFile.js";
import { tempDir } from "../helpers/files.js";

describe("eval task files", () => {
  it("refuse a task that is empty or only whitespace, naming the line and the field, before any run", () => {
    const file = join(tempDir(), "tasks.jsonl");
    writeFileSync(
      file,
      `${JSON.stringify({ task: "Which river?", answer: "Seine" })}\n${JSON.stringify({ task: " \t\n ", answer: "x" })}\n`,
    );
    expect(() => readTaskFile(file)).toThrow(TaskFileError);
    expect(() => readTaskFile(file)).toThrow(`${file}:2: task: the task is empty or only whitespace`);
  });
});
