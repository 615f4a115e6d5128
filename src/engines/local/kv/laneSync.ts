import type { Token } from "node-llama-cpp";
import type { WeightSet } from "../../../engine/index.js";
import { commonPrefixLength } from "../../../engine/index.js";
import type { CutFloor, PrefixKeyOf } from "../deciding/SessionRules.js";
import type { EngineParts } from "./EngineParts.js";
import { ROW_GROUP } from "./DecodeLog.js";
import type { Lane } from "./Lane.js";
import type { PromptPrefix } from "./PrefixStore.js";
import { cutSequence, firstCuttable } from "./slidingWindow.js";

/**
 * What bringing a lane up to a prompt cost: tokens kept, evaluated, read back from a saved state (`shared`: a prompt
 * prefix); time.
 */
export interface Synced {
  reused: number;
  evaluated: number;
  restored: number;
  shared: number;
  ms: number;
}

type LaneHost = Pick<EngineParts, "pool" | "prefixes" | "scheduler" | "batchInvariant">;

/**
 * Decodes of 2 to 63 tokens after a long cache cost up to ten times more per token than one of 64 on ggml's CPU
 * kernels (ggml picks a slower kernel below 64 rows; `npm run bench -- --scenario binding` shows a binding's prefill
 * and decode speeds). A short decode therefore starts earlier, re-evaluating up to this many cached tokens of the
 * same weights: the cache stays exact (its decode log records the split the reference replays).
 */
export const MIN_DECODE_TOKENS = 64;

export const now = () => performance.now();

/**
 * How a lane is brought to a prompt. `activatedFrom` (an activated LoRA's lane only): the prompt's invocation
 * point, where the lane's adapter starts applying (Infinity: nowhere, the prompt lacks its invocation).
 * `prefix`: the shared prompt prefix an empty cache may start from, with the key naming its weights. `cutFloor`: how
 * far back the cache can be cut and continued (default: what a sliding-window cache still holds).
 */
export interface SyncPlan {
  activatedFrom?: number;
  prefix?: PrefixPlan;
  cutFloor?: CutFloor;
}

export interface PrefixPlan extends PromptPrefix {
  /** The weights the prefix is computed under (the base for an activated LoRA's lane). */
  readonly weights: WeightSet;
  readonly keyOf: PrefixKeyOf;
}

/**
 * The weights the lane's next tokens are computed under: its own, or the base for an activated LoRA whose invocation is
 * absent.
 */
export const tailWeights = (lane: Lane): WeightSet =>
  lane.activatedFrom === Infinity ? lane.weights.baseOnly() : lane.weights;

/**
 * Evaluates `target[start, end)` after the cache (which holds at least `start` tokens of it), under the weights
 * already applied, never leaving a short remainder after a cache as a decode of its own. Decodes stop at the
 * shared prefix's end to save it there; a first decode shorter than MIN_DECODE_TOKENS starts earlier, in what
 * the cache held before (never before `floor`, where these weights begin, nor before `cutFloor`, where a cut would
 * lose the sliding window). Under model.batchInvariant each decode starts on the grid of row groups, taking up to
 * three tokens before it again (of the cache, or of the decode that stopped at the prefix's end). Returns the tokens
 * evaluated, each counted once.
 */
async function evaluateRange(
  host: LaneHost,
  lane: Lane,
  target: readonly Token[],
  start: number,
  end: number,
  floor: number,
  prefix: PrefixPlan | undefined,
  cutFloor: CutFloor,
): Promise<number> {
  const sequence = lane.slot!.sequence;
  const saveAt =
    prefix &&
    host.prefixes &&
    prefix.tokens.length > start &&
    commonPrefixLength(prefix.tokens, target) === prefix.tokens.length &&
    !host.prefixes.has(prefixKey(prefix))
      ? prefix.tokens.length
      : undefined;
  const batch = sequence.context.batchSize;
  // batch-invariant: every decode starts on a grid of row groups from `floor` (DecodeLog.ROW_GROUP), so the rows ggml
  // computes outside a group are always the range's last ones, whatever the cache happened to hold
  const group = host.batchInvariant ? ROW_GROUP : 1;
  const onGrid = (at: number) => Math.max(floor + Math.floor((at - floor) / group) * group, cutFloor(sequence));
  // where the first decode began: what this call evaluated is [first, end), once however the decodes overlap
  let first: number | undefined;
  while (start < end) {
    let stop = saveAt !== undefined && saveAt > start && saveAt < end ? saveAt : end;
    let from = start;
    // batch-invariant: not even one token alone, whatever the cache happened to hold (a background step's progress)
    const shortest = host.batchInvariant ? 1 : 2;
    if (first === undefined && stop - from >= shortest && stop - from < MIN_DECODE_TOKENS && from > floor)
      from = Math.min(from, Math.max(floor, stop - MIN_DECODE_TOKENS, cutFloor(sequence)));
    // may evaluate again up to three tokens of the cache, or of the previous decode when it stopped at `saveAt`
    if (from > floor) from = Math.min(from, onGrid(from));
    // One batch per decode: a decode holds its round until all of it is decoded, and other sessions' decodes wait for
    // the round to end. After a cache, a remainder shorter than MIN_DECODE_TOKENS would be a decode of its own, dear
    // per token (see MIN_DECODE_TOKENS: 512 + 16 costs more than 264 + 264), so such an append goes in even pieces; a
    // prompt from the start goes in whole batches, as node-llama-cpp would split it.
    const n = stop - from;
    if (n > batch)
      stop =
        from > 0 && n % batch > 0 && n % batch < MIN_DECODE_TOKENS
          ? from + Math.ceil(n / Math.ceil(n / batch))
          : from + batch;
    // a decode that more decodes follow ends on the grid too (a shared prefix's end may not: the next one starts back)
    if (stop < end && stop !== saveAt && onGrid(stop) > from) stop = onGrid(stop);
    await cutSequence(sequence, from, cutFloor);
    await sequence.evaluateWithoutGeneratingNewTokens(target.slice(from, stop));
    first ??= from;
    if (stop === saveAt) await host.prefixes!.save(prefixKey(prefix!), sequence, lane.replay().decodes);
    start = stop;
  }
  return first === undefined ? 0 : end - first;
}

/**
 * How much of the lane's cache a prompt can keep: its common prefix; if invariant, only whole row groups, or the whole
 * prompt when a decode ended exactly at its end (DecodeLog.reusable).
 */
function reusable(host: LaneHost, lane: Lane, tokens: readonly Token[]): number {
  const lcp = commonPrefixLength(lane.slot!.sequence.contextTokens, tokens);
  return host.batchInvariant ? lane.reusable(lcp, tokens.length) : lcp;
}

const prefixKey = (p: PrefixPlan) => p.keyOf(p.scope, p.weights, p.tokens);

/**
 * Restores the shared prefix into the lane's empty cache if one is saved for `target`; the tokens restored. Caller
 * holds the lock.
 */
async function restorePrefix(
  host: LaneHost,
  lane: Lane,
  target: readonly Token[],
  prefix: PrefixPlan | undefined,
  upTo: number,
): Promise<number> {
  const length = prefix?.tokens.length ?? 0;
  if (!prefix || !host.prefixes || length === 0 || length > upTo || lane.slot!.sequence.nextTokenIndex !== 0) return 0;
  if (commonPrefixLength(prefix.tokens, target) < length) return 0;
  const decodes = await host.prefixes.restore(prefixKey(prefix), lane.slot!.sequence);
  if (!decodes) return 0;
  lane.restoreLog({ decodes });
  return lane.slot!.sequence.nextTokenIndex;
}

/**
 * Brings the lane to `tokens` minus the last one (node-llama-cpp evaluates the last prompt token itself when it
 * samples), reusing the longest cached prefix computed under the right weights, and leaves the weights of what
 * comes next applied. An activated LoRA's lane keeps the base's KV before the invocation point and the
 * adapter's from it: what its cache holds on the wrong side of the point (the point moved) is evaluated again.
 * A lane coming back from disk (spilled) loads its saved state first; an empty cache starts from the shared
 * prompt prefix when one is saved, and saves it when not. Caller holds the lock.
 */
export async function syncLane(
  host: LaneHost,
  lane: Lane,
  tokens: readonly Token[],
  plan: SyncPlan = {},
): Promise<Synced> {
  const started = now();
  const sequence = lane.slot!.sequence;
  // a lane back from disk: its saved state goes into the empty sequence it was given (never over what one holds)
  const spilled =
    sequence.nextTokenIndex === 0 && (await host.pool.restore(lane)) ? sequence.nextTokenIndex : undefined;
  if (!tokens.length) {
    lane.decodeWeights = tailWeights(lane);
    return {
      reused: sequence.nextTokenIndex,
      evaluated: 0,
      restored: spilled ?? 0,
      shared: 0,
      ms: spilled === undefined ? 0 : now() - started,
    };
  }
  const target = tokens.slice(0, -1);
  const activated = plan.activatedFrom !== undefined;
  // where the lane's own weights begin: in the prompt, and in what the cache holds
  const from = plan.activatedFrom ?? 0;
  const was = lane.activatedFrom ?? 0;
  const lcp = reusable(host, lane, target);
  const cutFloor = plan.cutFloor ?? firstCuttable;
  let keep = await cutSequence(sequence, was === from ? lcp : Math.min(lcp, was, from), cutFloor);
  lane.activatedFrom = activated ? from : undefined;
  const baseEnd = Math.min(from, target.length);
  // the prefix lies under the weights of the first segment: the base's before an invocation point, else the lane's
  const shared =
    keep === 0 ? await restorePrefix(host, lane, target, plan.prefix, activated ? baseEnd : target.length) : 0;
  keep = Math.max(keep, shared);
  let evaluated = 0;
  if (keep < baseEnd) {
    lane.decodeWeights = lane.weights.baseOnly();
    evaluated += await evaluateRange(host, lane, target, keep, baseEnd, 0, plan.prefix, cutFloor);
  }
  lane.decodeWeights = tailWeights(lane);
  if (from < target.length)
    evaluated += await evaluateRange(
      host,
      lane,
      target,
      Math.max(keep, from),
      target.length,
      from,
      activated ? undefined : plan.prefix,
      cutFloor,
    );
  host.scheduler.foregroundTokens += evaluated;
  const reused = target.length - evaluated;
  return {
    reused,
    evaluated,
    restored: Math.min(spilled ?? shared, reused),
    shared: Math.min(shared, reused),
    ms: now() - started,
  };
}

/**
 * One step ahead of time: extends the lane towards `frontier` (the tokens the session's active cache holds)
 * by at most `maxTokens`, under `weights` (the lane's own), starting an empty lane from the shared prefix when
 * one is saved. Returns the tokens decoded (0 after a restore alone, undefined when the lane is already there).
 * Caller holds the lock.
 */
export async function extendLane(
  host: LaneHost,
  lane: Lane,
  weights: WeightSet,
  frontier: readonly Token[],
  maxTokens: number,
  plan: Pick<SyncPlan, "prefix" | "cutFloor">,
): Promise<number | undefined> {
  const sequence = lane.slot!.sequence;
  const cutFloor = plan.cutFloor ?? firstCuttable;
  const lcp = reusable(host, lane, frontier);
  if (lcp >= frontier.length) return undefined;
  const kept = await cutSequence(sequence, lcp, cutFloor);
  if (kept === 0 && (await restorePrefix(host, lane, frontier, plan.prefix, frontier.length)) > 0) return 0;
  lane.decodeWeights = weights;
  // no prefix is saved from here: a save (a state file written) would hold the context past one decode batch
  return evaluateRange(host, lane, frontier, kept, Math.min(frontier.length, kept + maxTokens), 0, undefined, cutFloor);
}

/** Clears the lane and evaluates the prompt under its weights from the start. Caller holds the lock. */
export async function rebuildLane(
  host: LaneHost,
  lane: Lane,
  tokens: readonly Token[],
  plan: SyncPlan = {},
): Promise<Synced> {
  await lane.slot!.sequence.clearHistory();
  lane.clearLog();
  lane.activatedFrom = undefined;
  return syncLane(host, lane, tokens, { activatedFrom: plan.activatedFrom });
}

/**
 * A failed switch: the new lane gives its sequence back. Taken from the previous lane (in place), it
 * returns to it emptied, and the previous lane's spilled state, if any, is restored into it.
 */
export async function abandonLane(host: LaneHost, lane: Lane, previous: Lane): Promise<void> {
  const slot = lane.detach();
  if (!slot) return;
  if (previous.slot) return slot.sequence.dispose();
  previous.attach(slot);
  await slot.sequence.clearHistory();
  await syncLane(host, previous, []).catch(() => undefined); // an empty cache is still a correct one
}
