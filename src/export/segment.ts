import type { AssistantMessage, HistoryMessage } from "../sessions/history.js";
import { BASE_CAPABILITY } from "../library/manifest.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../library/weightActions.js";
import type { Trajectory } from "./recordedTrajectory.js";

/** Who ended a stage: the adapter's own exit call, the harness or a client releasing it, or the end of the trace. */
export type StageExit = "model" | "harness" | "client" | "end";

/**
 * One stage occurrence of a capability in one trajectory: the paper's training sample (Eq. 5). The adapter
 * learns only from `targets`; everything else in `messages` is context with zero loss.
 */
export interface StageSample {
  trajectory: string;
  capability: string;
  /** 1-based: the n-th stage of this capability in the trajectory. */
  occurrence: number;
  /** The run's keep_tool_result, applied to `messages` as of each target when rendered. */
  keepToolResult: number;
  /**
   * The full history up to the last target. It stops there: later messages (the release result, or a release
   * the harness recorded after the adapter's last turn) carry no loss and no target attends to them.
   */
  messages: HistoryMessage[];
  /** `messages[0, contextLength)` is everything before the stage, ending with its load exchange. */
  contextLength: number;
  /** Indices in `messages`: the adapter's own turns (reasoning and tool calls) and its exit call. */
  targets: number[];
  exit: StageExit;
}

/**
 * A turn the weights of `capability` wrote themselves. Prescribed exchanges (client, harness) are context even inside
 * its stage.
 */
const isTarget = (m: HistoryMessage, capability: string): m is AssistantMessage =>
  m.role === "assistant" && m.author === "model" && m.adapter === (capability === BASE_CAPABILITY ? null : capability);

/** The capabilities a trajectory trains: the adapters it activated, and the base when the base wrote a turn. */
export function capabilitiesOf(trajectory: Trajectory): string[] {
  const loaded = trajectory.messages.map((_, i) => loadedAdapter(trajectory.messages, i));
  const base = trajectory.messages.some((m) => isTarget(m, BASE_CAPABILITY)) ? [BASE_CAPABILITY] : [];
  return [...new Set(loaded.filter((a): a is string => a !== undefined)), ...base];
}

/**
 * One sample per stage occurrence of `capability`: from a successful load exchange of it to the offload
 * exchange that releases it (or the end of the trace). A failed load starts no stage; a stage in which the
 * adapter wrote nothing (a run cancelled right after the load) gives no sample. The base's stage is the whole
 * trajectory: one sample whose targets are all its own turns, the adapters' stages between them context.
 */
export function segment(trajectory: Trajectory, capability: string): StageSample[] {
  const history = trajectory.messages;
  if (capability === BASE_CAPABILITY) return baseSample(trajectory);
  const samples: StageSample[] = [];
  let occurrence = 0;
  for (let i = 0; i < history.length; i++) {
    if (loadedAdapter(history, i) !== capability) continue;
    occurrence++;
    const stageStart = afterResults(history, i);
    const release = history.findIndex((_, k) => k >= stageStart && releases(history, k));
    const stageEnd = release < 0 ? history.length : release + 1;
    const targets: number[] = [];
    for (let k = stageStart; k < stageEnd; k++) if (isTarget(history[k]!, capability)) targets.push(k);
    if (targets.length) {
      samples.push({
        trajectory: trajectory.id,
        capability,
        occurrence,
        keepToolResult: trajectory.keepToolResult,
        messages: history.slice(0, targets.at(-1)! + 1),
        contextLength: stageStart,
        targets,
        exit: release < 0 ? "end" : (history[release] as AssistantMessage).author,
      });
    }
    i = stageEnd - 1;
  }
  return samples;
}

/** The base's sample: everything before its first turn is context; the trace ends its stage. */
function baseSample(trajectory: Trajectory): StageSample[] {
  const targets = trajectory.messages.flatMap((m, i) => (isTarget(m, BASE_CAPABILITY) ? [i] : []));
  if (!targets.length) return [];
  return [
    {
      trajectory: trajectory.id,
      capability: BASE_CAPABILITY,
      occurrence: 1,
      keepToolResult: trajectory.keepToolResult,
      messages: trajectory.messages.slice(0, targets.at(-1)! + 1),
      contextLength: targets[0]!,
      targets,
      exit: "end",
    },
  ];
}

/** The adapter a successful load_lora call in `history[i]` activated, if it holds one. */
export function loadedAdapter(history: readonly HistoryMessage[], i: number): string | undefined {
  const m = history[i]!;
  if (m.role !== "assistant") return undefined;
  const call = m.toolCalls.find((c) => c.name === LOAD_LORA && succeeded(history, i, c.id));
  return typeof call?.arguments.adapter === "string" ? call.arguments.adapter : undefined;
}

/** `history[i]` holds a successful offload_lora call. */
function releases(history: readonly HistoryMessage[], i: number): boolean {
  const m = history[i]!;
  return m.role === "assistant" && m.toolCalls.some((c) => c.name === OFFLOAD_LORA && succeeded(history, i, c.id));
}

/** The call `callId` of the assistant message at `i` has a result that is not an error. */
function succeeded(history: readonly HistoryMessage[], i: number, callId: string): boolean {
  const result = history.find((m, k) => k > i && m.role === "tool" && m.callId === callId);
  return result?.role === "tool" && !result.isError;
}

/** The index after the results that answer the calls of the assistant message at `i`. */
function afterResults(history: readonly HistoryMessage[], i: number): number {
  let k = i + 1;
  while (history[k]?.role === "tool") k++;
  return k;
}
