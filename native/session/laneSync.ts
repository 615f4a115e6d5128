import type { LlamaContextSequence, Token } from "../llama/nodeLlamaCpp.js";
import type { AdapterVersion } from "../../src/engine/index.js";
import type { Lane } from "../cache/Lane.js";
import type { SessionHost } from "./SessionHost.js";

/** What bringing a lane up to a prompt cost: tokens kept, evaluated, read back from a spilled state; time. */
export interface Synced {
  reused: number;
  evaluated: number;
  restored: number;
  ms: number;
}

type LaneHost = Pick<SessionHost, "pool" | "weightOf">;

export const now = () => performance.now();

/** null for the base, else the adapters' aliases joined with "+". */
export const weightsLabel = (versions: readonly AdapterVersion[]): string | null => (versions.length ? versions.map((v) => v.alias).join("+") : null);

/** Applies the lane's adapter set to its context (the step where weights reach llama.cpp). Caller holds the lock. */
export async function applyWeights(host: LaneHost, lane: Lane): Promise<void> {
  const versions = lane.versions;
  await lane.slot!.context.applyWeights(
    versions,
    versions.map((v) => host.weightOf(v)),
  );
}

/**
 * Brings the sequence to `tokens` minus the last one (node-llama-cpp evaluates the last prompt token
 * itself when it samples), reusing the longest cached prefix. Caller holds the lock with weights applied.
 */
export async function syncPrefix(sequence: LlamaContextSequence, tokens: readonly Token[]): Promise<{ reused: number; evaluated: number; ms: number }> {
  const started = now();
  const target = tokens.slice(0, -1);
  await sequence.adaptStateToTokens(target, false);
  const reused = sequence.nextTokenIndex;
  const rest = target.slice(reused);
  if (rest.length) await sequence.evaluateWithoutGeneratingNewTokens(rest);
  return { reused, evaluated: rest.length, ms: now() - started };
}

/** Applies the lane's weights and evaluates what its cache lacks of the prompt. Caller holds the lock. */
export async function syncLane(host: LaneHost, lane: Lane, tokens: readonly Token[]): Promise<Synced> {
  await applyWeights(host, lane);
  if (!tokens.length) return { reused: lane.slot!.sequence.nextTokenIndex, evaluated: 0, restored: 0, ms: 0 };
  const { reused, evaluated, ms } = await syncPrefix(lane.slot!.sequence, tokens);
  return { reused, evaluated, restored: 0, ms };
}

/** Clears the lane and evaluates the prompt under its weights from the start. Caller holds the lock. */
export async function rebuildLane(host: LaneHost, lane: Lane, tokens: readonly Token[]): Promise<Synced> {
  await lane.slot!.sequence.clearHistory();
  lane.clearLog();
  return syncLane(host, lane, tokens);
}

/** Brings a lane to the prompt: restores its spilled state first if it has one, else builds on what it holds. */
export async function continueLane(host: LaneHost, lane: Lane, tokens: readonly Token[]): Promise<Synced> {
  const started = now();
  if (!(await host.pool.restore(lane))) return syncLane(host, lane, tokens);
  const restored = lane.slot!.sequence.nextTokenIndex;
  const sync = await syncLane(host, lane, tokens);
  return { ...sync, restored, ms: now() - started };
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
  await continueLane(host, previous, []).catch(() => undefined); // an empty cache is still a correct one
}
