import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PROMPTS_DIR } from "../../src/paths.js";
import { PromptLibrary } from "../../src/prompts/PromptLibrary.js";
import { PYTHON_SOURCES } from "./library.js";

/** The system prompt a session gets by default, as the server renders it. */
export const plainSystemPrompt = () => PromptLibrary.load(PROMPTS_DIR).render("system") ?? "";

/**
 * The worked examples (training/gemma/self-load-examples.md, written in node-llama-cpp's inline syntax, Gemma's) in
 * the syntax of the served template: hermes `<tool_call>` and `<tool_response>` where the model has them.
 */
export function workedExamples(hermes: boolean): string {
  const text = readFileSync(join(PYTHON_SOURCES, "self-load-examples.md"), "utf8");
  if (!hermes) return text;
  return text
    .replace(
      /\|\|call: (\w+)\((\{.*?\})\)/g,
      (_, fn: string, args: string) => `\n<tool_call>\n{"name": "${fn}", "arguments": ${args}}\n</tool_call>`,
    )
    .replace(/\|\|result: (.*)/g, (_, result: string) => `<tool_response>\n${result}\n</tool_response>`);
}

/** The plain system prompt with the worked examples after it. */
export const workedExamplesPrompt = (hermes: boolean) => `${plainSystemPrompt().trimEnd()}\n${workedExamples(hermes)}`;
