import type { AdapterLibrary } from "../library/AdapterLibrary.js";
import { mergePolicies } from "../harness/runInput.js";
import type { Policy } from "../harness/types.js";
import { OpenAIError } from "./errors.js";

/**
 * The policies as OpenAI model names: the WeAct loops, the comparison modes (a `static:<method>` per loaded merge),
 * one per resident adapter.
 */
export function modelNames(library: AdapterLibrary): string[] {
  return [
    "weact-soft",
    "weact-hard",
    "base",
    "static",
    ...mergePolicies(library),
    ...library
      .list()
      .filter((a) => a.info)
      .map((a) => `single:${a.entry.alias}`),
  ];
}

export function policyOf(model: string, library: AdapterLibrary): Policy {
  if (!modelNames(library).includes(model)) {
    throw new OpenAIError(
      404,
      `the model "${model}" does not exist; GET /v1/models lists them (${modelNames(library).join(", ")})`,
      "invalid_request_error",
      "model",
      "model_not_found",
    );
  }
  return model === "weact-soft" ? "soft" : model === "weact-hard" ? "hard" : model;
}
