import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { AdapterVersion, Conversation, LaneState, WeightSet } from "../../../engine/index.js";
import {
  commonPrefixLength,
  ensureActivatedAlone,
  SessionClosedError,
  UnknownAdapterError,
} from "../../../engine/index.js";
import { ROW_GROUP, type CacheReplay } from "./DecodeLog.js";
import { renderConversation } from "../../../llamaCpp/render.js";
import type { SessionRules } from "../deciding/SessionRules.js";
import type { EngineParts } from "./EngineParts.js";
import type { Lane, Slot } from "./Lane.js";
import type { PrefixPlan, SyncPlan } from "./laneSync.js";

/** The rendered system prompt and function docs of the conversations this session was last given. */
interface PromptPrefixCache {
  system: string | undefined;
  functions: Conversation["functions"];
  tokens: readonly Token[];
}

/**
 * The KV caches of one session: a lane per weight set it has used (one under `rebuild`), the active one among
 * them, and what bringing a lane up to a prompt needs to know (an activated LoRA's invocation point, the shared
 * prompt prefix). Bookkeeping only: the session switches, generates and catches up with it.
 */
export class SessionLanes {
  /** The active lane: live (it has a sequence), but inside an in-place switch. */
  private current: Lane;
  /** Every lane by its weights' key, the active one included. */
  readonly byKey = new Map<string, Lane>();
  private prompt: PromptPrefixCache | undefined;
  private closed = false;

  constructor(
    readonly sessionId: number,
    private readonly parts: EngineParts,
    readonly rules: SessionRules,
    first: Lane,
  ) {
    this.current = first;
    this.byKey.set(first.weights.key, first);
    parts.pool.use(first);
    if (this.activates(first.weights.versions)) first.activatedFrom = Infinity;
  }

  get active(): Lane {
    return this.current;
  }

  /** Makes `lane` the active one (a switch moved the session onto it). */
  activate(lane: Lane): void {
    this.current = lane;
  }

  /** Tokens whose KV the active lane holds now (none only inside an in-place switch). */
  get cachedTokens(): number {
    return this.current.slot?.sequence.nextTokenIndex ?? 0;
  }

  /** How the active lane's cache was computed: what a reference context must replay to reproduce it exactly. */
  cacheReplay(): CacheReplay {
    return this.current.replay();
  }

  laneStates(): LaneState[] {
    return [...this.byKey.values()]
      .filter((l) => !l.empty)
      .map((l) => ({
        weights: l.weights.label ?? "base",
        active: l === this.current,
        state: l.slot ? "live" : "spilled",
        tokens: l.slot?.sequence.nextTokenIndex ?? l.spilled!.tokens,
      }));
  }

  /** The weights of the session's base lane. */
  baseWeights(): WeightSet {
    return this.rules.weightsOf([]);
  }

  /** Every alias's current version, or undefined when one left the library (a hint may name it). */
  resolveAll(aliases: readonly string[]): AdapterVersion[] | undefined {
    try {
      return aliases.map((a) => this.parts.adapters.resolve(a));
    } catch (err) {
      if (err instanceof UnknownAdapterError) return undefined;
      throw err;
    }
  }

  /** Whether `versions` is an activated LoRA (which applies alone, on the session's base lane). */
  activates(versions: readonly AdapterVersion[]): boolean {
    return versions.length === 1 && this.parts.adapters.invocationOf(versions[0]!) !== undefined;
  }

  /** An activated LoRA applies alone (ensureActivatedAlone). */
  ensureApplicable(versions: readonly AdapterVersion[]): void {
    ensureActivatedAlone(versions, (v) => this.parts.adapters.invocationOf(v));
  }

  /**
   * Drops the lanes no switch can reach any more: a lane is reachable while resolving its aliases now gives
   * its key again (a refreshed or removed adapter changes or loses it). Each is dropped under its sequence lock (an
   * eviction may be at it).
   */
  async dropUnreachable(): Promise<void> {
    for (const [key, lane] of this.byKey) {
      if (lane === this.current) continue;
      const versions = this.resolveAll(lane.weights.versions.map((v) => v.alias));
      if (versions && this.rules.weightsOf(versions).equals(lane.weights)) continue;
      await this.drop(lane);
      this.byKey.delete(key);
    }
  }

  /**
   * How a sync brings `lane` to `tokens`: its activated LoRA's invocation point, and the shared prefix an empty cache
   * may start from.
   */
  planFor(lane: Lane, tokens: readonly Token[]): SyncPlan {
    const { versions } = lane.weights;
    const invocation = this.activates(versions) ? this.parts.adapters.invocationOf(versions[0]!) : undefined;
    const activatedFrom = invocation ? (this.rules.invocationOf(tokens, invocation) ?? Infinity) : undefined;
    return { activatedFrom, prefix: this.prefixPlan(lane, activatedFrom), cutFloor: this.rules.cutFloor };
  }

  /**
   * The shared prompt prefix for `lane`: computed under the base before an activated LoRA's invocation point, else
   * under the lane's weights.
   */
  prefixPlan(lane: Lane, activatedFrom: number | undefined): PrefixPlan | undefined {
    if (!this.parts.prefixes || !this.prompt?.tokens.length) return undefined;
    const weights = activatedFrom === undefined ? lane.weights : this.baseWeights();
    return { tokens: this.prompt.tokens, scope: this.rules.promptScope, weights, keyOf: this.rules.prefixKeyOf };
  }

  /**
   * The conversation's shareable prefix: the tokens its system turn (with the function docs, which chat
   * templates render into it) shares with the whole prompt. Rendered again only when the system text or the
   * functions change.
   */
  rememberPrompt(conversation: Conversation): void {
    if (!this.parts.prefixes) return;
    const first = conversation.turns[0];
    const system = first?.role === "system" ? first.text : undefined;
    if (this.prompt && this.prompt.system === system && this.prompt.functions === conversation.functions) return;
    const whole = this.render(conversation);
    const head = this.render({ turns: first?.role === "system" ? [first] : [], functions: conversation.functions });
    const shared = commonPrefixLength(whole, head);
    this.prompt = {
      system,
      functions: conversation.functions,
      // ends on the row-group grid: a session that restores it decodes on from its end, and a restored sliding-window
      // state cannot be cut below that end, so an end off the grid left whole groups only short of it and every later
      // cut (an aLoRA's return to the base, a turn taken back) cleared the lane back to the prefix
      tokens: whole.slice(0, shared - (shared % ROW_GROUP)),
    };
  }

  render(conversation: Conversation): Token[] {
    return renderConversation(this.parts.model, this.parts.chatWrapper, conversation).tokens;
  }

  /**
   * The active lane with its sequence lock held (re-read under the lock: a switch may have moved it); the caller
   * releases the lock.
   */
  async lockActive(): Promise<{ lane: Lane; sequence: LlamaContextSequence; release: () => void }> {
    for (;;) {
      const lane = this.current;
      const slot = this.liveSlot();
      const release = await slot.lock.acquire();
      if (this.current === lane && lane.slot === slot) return { lane, sequence: slot.sequence, release };
      release();
      this.ensureOpen();
    }
  }

  /** The active lane's slot; SessionClosedError if it has none. */
  liveSlot(): Slot {
    const slot = this.current.slot;
    if (!slot) throw new SessionClosedError();
    return slot;
  }

  ensureOpen(): void {
    if (this.closed) throw new SessionClosedError();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Refuses new work at once; `dropAll` gives everything back once the work under way is done. */
  markClosed(): void {
    this.closed = true;
  }

  /** Gives every lane's sequence or spilled state back to the pool, each live one under its sequence lock. */
  async dropAll(): Promise<void> {
    for (const lane of this.byKey.values()) await this.drop(lane);
  }

  private async drop(lane: Lane): Promise<void> {
    const slot = lane.slot;
    if (!slot) return this.parts.pool.drop(lane);
    const release = await slot.lock.acquire();
    try {
      await this.parts.pool.drop(lane);
    } finally {
      release();
    }
  }
}
