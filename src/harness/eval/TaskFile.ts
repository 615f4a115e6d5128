import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { z } from "zod";
import { SteeringSchema } from "../types.js";

export const EvalTaskSchema = z
  .object({
    id: z.string().min(1).optional(),
    task: z.string().regex(/\S/, "the task is empty or only whitespace"),
    answer: z.union([z.string(), z.array(z.string()).min(1)]),
    /** A subset the table also reports on its own (e.g. "never-trained": facts no training sample stated). */
    group: z.string().min(1).max(64).optional(),
    /** Expected adapter sequence, for adapter-selection accuracy. */
    stages: z.array(z.string()).optional(),
    steering: z.array(SteeringSchema).optional(),
  })
  .strict();
export type EvalTask = z.infer<typeof EvalTaskSchema> & { id: string };

export class TaskFileError extends Error {}

/** Reads a JSONL task file; a bad line is reported with its number and field. */
export function readTaskFile(path: string): EvalTask[] {
  const lines = readTasksText(path).split(/\r?\n/);
  const tasks: EvalTask[] = [];
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      throw new TaskFileError(`${path}:${i + 1}: not JSON`);
    }
    const parsed = EvalTaskSchema.safeParse(raw);
    if (!parsed.success)
      throw new TaskFileError(
        `${path}:${i + 1}: ${parsed.error.issues.map((x) => `${x.path.join(".") || "(root)"}: ${x.message}`).join("; ")}`,
      );
    tasks.push({ ...parsed.data, id: parsed.data.id ?? `line-${i + 1}` });
  });
  if (!tasks.length) throw new TaskFileError(`${path}: no tasks`);
  return tasks;
}

/** The file's text; one it cannot read is named with what the command expects there. */
function readTasksText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === "ENOENT"
        ? "does not exist"
        : code === "EISDIR"
          ? "is a folder"
          : `cannot be read (${(err as Error).message})`;
    throw new TaskFileError(
      `the tasks file (eval TASKS.jsonl) ${resolve(path)} ${why}: give the path of a JSONL file with one {"task", "answer"} object per line, such as models/trained/eval-tasks.jsonl`,
    );
  }
}
