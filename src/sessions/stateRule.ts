import type { ToolCallRecord } from "./history.js";
import { LOAD_LORA } from "../library/weightActions.js";

/** Answering a model call means executing exactly that call; anything else fails it (and the model reads why). */
export function callMismatch(
  action: string,
  call: ToolCallRecord | undefined,
  adapter: string | undefined,
): string | undefined {
  if (!call) return undefined;
  if (call.name !== action)
    return `${action} refused: call ${call.id} is a ${call.name} call; it must be answered by ${call.name}`;
  const asked = call.arguments.adapter;
  if (action === LOAD_LORA && adapter !== undefined && asked !== undefined && asked !== adapter)
    return `load_lora refused: the model's call asks for "${String(asked)}", not "${adapter}"`;
  return undefined;
}

export interface StateRuleInput {
  action: string;
  /** The active adapter (null: the base model serves). */
  active: string | null;
  /** The adapter named by the action (load: the one to load; offload: optional, must be the active one). */
  adapter: string | undefined;
  /** The model call this action answers, if any. */
  call: ToolCallRecord | undefined;
  /** Unanswered calls of the model's last turn. */
  pending: readonly ToolCallRecord[];
  /** Resident aliases of the library. */
  resident: readonly string[];
}

/**
 * The paper's state rule: load only from the base and only a resident adapter, offload only the active one;
 * a prescribed action waits until the model's own calls are answered. Returns why an action is refused.
 */
export function stateRuleProblem({
  action,
  active,
  adapter,
  call,
  pending,
  resident,
}: StateRuleInput): string | undefined {
  if (!call && pending.length)
    return `the model's last turn has unanswered calls (${pending.map((c) => c.id).join(", ")}); answer them before a prescribed ${action}`;
  if (action === LOAD_LORA) {
    if (active !== null)
      return `load_lora refused: adapter "${active}" is active; offload it first (adapters load only from the base model)`;
    if (!adapter) return "load_lora refused: name the adapter to load (adapter)";
    if (!resident.includes(adapter))
      return `load_lora refused: unknown adapter "${adapter}"; the library has: ${resident.join(", ")}`;
    return undefined;
  }
  if (active === null) return "offload_lora refused: no adapter is active (the base model is serving)";
  if (adapter !== undefined && adapter !== active)
    return `offload_lora refused: "${adapter}" is not the active adapter; "${active}" is`;
  return undefined;
}

/**
 * The weights a trajectory needs next, most likely first (null: the base): the harness's plan when it has one
 * (hard mode knows its next stage), else what the state rule allows within two actions from here: an adapter
 * is released to the base first, then any other resident adapter may be loaded; from the base, any of them.
 * Adapters the trajectory has not `used` yet come before those it has: a trajectory moves on through its stages,
 * and a first visit has the whole history to evaluate, a return only what came since.
 */
export function nextWeights(
  active: string | null,
  resident: readonly string[],
  planned?: readonly (string | null)[],
  used: ReadonlySet<string> = new Set(),
): (string | null)[] {
  if (planned) return planned.filter((a) => a !== active);
  const others = resident.filter((a) => a !== active);
  const adapters = [...others.filter((a) => !used.has(a)), ...others.filter((a) => used.has(a))];
  return active === null ? adapters : [null, ...adapters];
}
