/**
 * Test-only doors into the engine. Nothing in src/ imports this file: it exists so tests can prove that
 * the behaviours they check would fail without the mechanism under test. Planted bugs live here, injected
 * into a session as its switch strategy, lane or prefix keys, invocation finder or background weights, never
 * as branches in the engine's own code.
 */
import type { Token } from "node-llama-cpp";
import {
  AdapterVersion,
  aliasesOf,
  invocationStart,
  WeightSet,
  type LogProbs,
  type TokenId,
  type WeightRequest,
} from "../../engine/index.js";
import type { CacheReplay } from "./kv/DecodeLog.js";
import { replayedNextTokenLogProbs } from "./reference/replay.js";
import { prefixKeyOf } from "./kv/PrefixStore.js";
import { LocalEngine } from "./LocalEngine.js";
import { mayShareRound } from "./decoding/DecodeRounds.js";
import type { LocalEngineOptions } from "./engineOptions.js";
import type { LocalEngineSession } from "./LocalEngineSession.js";
import type { SwitchStrategy } from "./deciding/SwitchStrategy.js";

/** The bug the rebuild exists to prevent: a switch takes the new weights but keeps the cache computed under the old. */
export const keepStaleStrategy: SwitchStrategy = { plan: () => ({ kind: "unchanged" }) };

/** A session whose switches keep the stale KV cache. */
export function openStaleSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({ strategy: keepStaleStrategy });
}

/**
 * A `reuse` session whose lanes are keyed by alias alone, without the base model, the adapter's content hash
 * and scale: the planted bug the exact keys exist to prevent (a refreshed adapter would continue a stale cache).
 */
export function openAliasKeyedSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({
    weightsOf: (versions) =>
      WeightSet.keyedAs(
        engine.model.sha256,
        versions,
        WeightSet.of(
          "",
          versions.map((v) => AdapterVersion.of(v.alias, "", 1)),
        ).key,
      ),
  });
}

/**
 * A session whose shared prompt prefixes are keyed without the adapter versions (the base model's alone): a
 * lane for one adapter starts from the prefix computed under other weights. `promptScope` as in openSession.
 */
export function openPrefixKeyedWithoutVersionsSession(
  engine: LocalEngine,
  promptScope?: string,
): Promise<LocalEngineSession> {
  return engine.openSessionWith({
    prefixKeyOf: (scope, _weights, tokens) => prefixKeyOf(scope, WeightSet.of(engine.model.sha256, []), tokens),
    ...(promptScope !== undefined ? { promptScope } : {}),
  });
}

/**
 * An engine whose decode rounds go by context alone: decodes of sessions under other weights join a running round of
 * their context and are decoded under its weights (each session alone is still right: a round applies its first
 * decode's weights).
 */
export function loadWeightBlindRoundsEngine(options: LocalEngineOptions): Promise<LocalEngine> {
  return LocalEngine.load(options, { sameRound: (a, b) => a.group.context === b.group.context });
}

/**
 * An engine that batches the one-token decodes of sessions under the same weights in one round, as
 * model.batchInvariant false does, with everything else batch-invariant: what sharing only the decode step would do to
 * a session's numbers.
 */
export function loadSharedOneTokenRoundsEngine(options: LocalEngineOptions): Promise<LocalEngine> {
  return LocalEngine.load(options, {
    sameRound: (a, b) => a.tokens === 1 && b.tokens === 1 && mayShareRound(a, b),
  });
}

/** A session that applies an activated LoRA one token after its invocation point. */
export function openInvocationOffByOneSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({
    invocationOf: (tokens, invocation) => {
      const start = invocationStart(tokens, invocation);
      return start === undefined ? undefined : start + 1;
    },
  });
}

/** A session whose background extensions append to a lane under the active lane's weights instead of its own. */
export function openWrongBackgroundWeightsSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({ backgroundWeights: (_own, active) => active });
}

/**
 * A session that trusts node-llama-cpp's own test of a cut on a window-sized sliding-window cache (the cut lies after
 * the first cell left), not the window's: a lane is continued after cells of its window were freed.
 */
export function openWindowBlindSession(engine: LocalEngine): Promise<LocalEngineSession> {
  return engine.openSessionWith({
    cutFloor: (sequence) => {
      const first = sequence.stateCellsStartIndex;
      return first > 0 ? first + 1 : 0;
    },
  });
}

/**
 * The reference for cache correctness through the engine's own versions: a fresh context with `to`'s weights (an
 * alias, null for the base, or several) applied from the start, evaluating `tokens` in the same batch split as a
 * session (`replay`, a session's `cacheReplay()`), else all but the last token in one call; then the rest, then
 * the last. An activated LoRA's cache is the base's before its invocation point, in a context of its own.
 */
export function referenceNextTokenLogProbs(
  engine: LocalEngine,
  to: WeightRequest,
  tokens: readonly TokenId[],
  replay?: CacheReplay,
): Promise<LogProbs> {
  const from = replay?.activatedFrom;
  return engine.withReferenceContexts(aliasesOf(to), from === undefined ? 1 : 2, ([sequence, base]) =>
    replayedNextTokenLogProbs(sequence!, tokens as readonly Token[], replay, base && { base, from: from! }),
  );
}

/**
 * The independent correctness reference (no engine code on its path): tests compare the engine's caches
 * with it, given the base file and each adapter's own file and scale.
 */
export { PlainReference, type PlainAdapter, type PlainReferenceOptions } from "./reference/PlainReference.js";
export { DecodeLog, ROW_GROUP, type CacheReplay } from "./kv/DecodeLog.js";
export type { DecodeHold } from "./decoding/WorkLog.js";
export { MIN_DECODE_TOKENS } from "./kv/laneSync.js";
export { ReplayPastWindowError } from "./reference/replay.js";
export { argumentsBound, BEYOND_ANY_CONTEXT } from "./chat/callBound.js";
export {
  DecodeRounds,
  decodesAlone,
  mayShareRound,
  type DecodeGroup,
  type RoundTarget,
} from "./decoding/DecodeRounds.js";
export { WorkLog } from "./decoding/WorkLog.js";
