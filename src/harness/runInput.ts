import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import { MERGE_METHODS, type MergeMethod } from "../library/merge/index.js";
import { InvalidPolicyError, InvalidRunInputError } from "./errors.js";
import { mergePolicy, type Policy } from "./types.js";

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

/** Each stage must name a capability: a loaded adapter of the library that is not a static merge of others. */
function checkWorkflow(field: string, workflow: readonly string[], library: AdapterLibrary): void {
  for (const [i, alias] of workflow.entries()) {
    const missing = missingAdapter(alias, library);
    if (missing) throw new InvalidRunInputError(`${field}[${i}]`, missing);
    const merge = library.get(alias)!.entry.merge;
    if (merge)
      throw new InvalidRunInputError(
        `${field}[${i}]`,
        `"${alias}" is a static merge of ${merge.of.join(", ")}, not a capability a stage loads (policy ${mergePolicy(merge.method)} runs it); the capabilities are ${capabilityList(library)}`,
      );
  }
}

const capabilityList = (library: AdapterLibrary) =>
  library
    .capabilities()
    .map((a) => a.entry.alias)
    .join(", ") || "(none)";

/** Why `alias` names no adapter a stage can load (with the library's aliases), or undefined when it does. */
function missingAdapter(alias: string, library: AdapterLibrary): string | undefined {
  const aliases = `its adapters are ${library.aliases().join(", ") || "(none)"}`;
  const adapter = library.get(alias);
  if (!adapter) return `the library has no adapter "${alias}"; ${aliases}`;
  if (!adapter.info) return `adapter "${alias}" is in the library but not loaded (${adapter.error}); ${aliases}`;
  return undefined;
}

/** The `static:<method>` policies the library can run now: one per method that has a loaded merge. */
export function mergePolicies(library: AdapterLibrary): Policy[] {
  return MERGE_METHODS.filter((m) => library.list().some((a) => a.info && a.entry.merge?.method === m)).map(
    mergePolicy,
  );
}

/** The weights a comparison policy keeps for the whole run (undefined: the policy switches them). */
export function fixedAdapters(policy: Policy, library: AdapterLibrary): string[] | undefined {
  if (policy === "hard" || policy === "soft") return undefined;
  if (policy === "base") return [];
  // an activated LoRA applies alone (from its invocation point), so it cannot join the others
  if (policy === "static")
    return library
      .capabilities()
      .filter((a) => !a.info!.invocationTokens)
      .map((a) => a.entry.alias);
  const method = MERGE_METHODS.find((m) => policy === mergePolicy(m));
  if (method) return [staticMerge(method, library)];
  const missing = missingAdapter(policy.slice("single:".length), library);
  if (missing) throw new InvalidPolicyError("policy", `${missing} (single:<alias> takes one of them)`);
  return [policy.slice("single:".length)];
}

/** The first loaded merge by `method` in the library's order (the manifest's). */
function staticMerge(method: MergeMethod, library: AdapterLibrary): string {
  const merges = library.list().filter((a) => a.entry.merge?.method === method);
  const loaded = merges.find((a) => a.info);
  if (loaded) return loaded.entry.alias;
  if (merges.length)
    throw new InvalidPolicyError(
      "policy",
      `the library's ${method} merge ${merges.map((a) => `"${a.entry.alias}" did not load (${a.error})`).join(", ")}`,
    );
  throw new InvalidPolicyError(
    "policy",
    `the library has no ${method} merge of its adapters; make one with \`weact-mcp merge --method ${method} --out FILE.gguf\``,
  );
}
