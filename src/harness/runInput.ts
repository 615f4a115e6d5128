import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import { InvalidPolicyError, InvalidRunInputError } from "./errors.js";
import type { Policy } from "./types.js";

/** What `checkRunInput` reads of a run: its arguments after the schema's defaults. */
export interface RunInputFacts {
  task: string;
  policy: Policy;
  workflow?: readonly string[];
}

/**
 * Refuses, before a session exists or a token is generated, a run the harness could only fake: a task with nothing
 * to solve, or a workflow stage (the run's `workflow`, else the config's `harness.workflow` for the hard policy)
 * naming no loaded adapter of the library. A stage whose adapter leaves the library while the run is under way still
 * runs on the base model (`policies/hard.ts`).
 */
export function checkRunInput(input: RunInputFacts, library: AdapterLibrary, configWorkflow: readonly string[]): void {
  if (!input.task.trim())
    throw new InvalidRunInputError("task", "the task is empty or only whitespace; give the question or instruction");
  if (input.workflow) checkWorkflow("workflow", input.workflow, library);
  else if (input.policy === "hard") checkWorkflow("harness.workflow", configWorkflow, library);
  fixedAdapters(input.policy, library);
}

function checkWorkflow(field: string, workflow: readonly string[], library: AdapterLibrary): void {
  for (const [i, alias] of workflow.entries()) {
    const missing = missingAdapter(alias, library);
    if (missing) throw new InvalidRunInputError(`${field}[${i}]`, missing);
  }
}

/** Why `alias` names no adapter a stage can load (with the library's aliases), or undefined when it does. */
function missingAdapter(alias: string, library: AdapterLibrary): string | undefined {
  const loaded = library.aliases();
  const aliases = `its adapters are ${loaded.join(", ") || "(none)"}`;
  const adapter = library.get(alias);
  if (!adapter) return `the library has no adapter "${alias}"; ${aliases}`;
  if (!adapter.info) return `adapter "${alias}" is in the library but not loaded (${adapter.error}); ${aliases}`;
  return undefined;
}

/** The weights a comparison policy keeps for the whole run (undefined: the policy switches them). */
export function fixedAdapters(policy: Policy, library: AdapterLibrary): string[] | undefined {
  if (policy === "hard" || policy === "soft") return undefined;
  if (policy === "base") return [];
  // an activated LoRA applies alone (from its invocation point), so it cannot join the static merge
  if (policy === "static") return library.aliases().filter((a) => !library.get(a)?.info?.invocationTokens);
  const missing = missingAdapter(policy.slice("single:".length), library);
  if (missing) throw new InvalidPolicyError("policy", `${missing} (single:<alias> takes one of them)`);
  return [policy.slice("single:".length)];
}
