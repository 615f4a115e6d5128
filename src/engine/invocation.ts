import type { AdapterVersion } from "./AdapterVersion.js";
import { InvalidAdapterSetError } from "./errors.js";
import type { TokenId } from "./types.js";

/**
 * Where an activated LoRA starts applying in `tokens`: the start of the LAST occurrence of its invocation
 * sequence, found exactly as llama-server finds it (tools/server/server-context.cpp, `launch_slot_with_task`):
 * a scan from the end that, on a mismatch, starts over at the sequence's last token without testing the
 * mismatching token against it again. So [A, B] is not found in [A, B, B] (PEFT's forward search would find
 * it); serving an adapter the way llama-server does matters more than the corner case.
 * undefined when the scan finds none: the adapter then contributes nothing (llama-server sets its scale to 0).
 */
export function invocationStart(tokens: readonly TokenId[], invocation: readonly number[]): number | undefined {
  if (!invocation.length) return undefined;
  let match = invocation.length - 1;
  for (let i = tokens.length - 1; i >= 0; i--) {
    if (tokens[i] === invocation[match]) {
      if (match === 0) return i;
      match--;
    } else {
      match = invocation.length - 1;
    }
  }
  return undefined;
}

/**
 * Refuses a set of several adapters that holds an activated LoRA (`invocationOf` gives a version's invocation
 * sequence): it applies alone, since beside other adapters its invocation point would have no meaning (and
 * llama-server would apply it to every token).
 */
export function ensureActivatedAlone(
  versions: readonly AdapterVersion[],
  invocationOf: (version: AdapterVersion) => readonly number[] | undefined,
): void {
  if (versions.length > 1 && versions.some((v) => invocationOf(v)))
    throw new InvalidAdapterSetError(
      versions.map((v) => v.alias),
      "an activated LoRA (one with adapter.alora.invocation_tokens) applies alone, from its invocation point on",
    );
}
