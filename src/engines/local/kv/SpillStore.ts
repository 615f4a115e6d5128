import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { LlamaContextSequence } from "node-llama-cpp";
import type { Decode } from "./DecodeLog.js";

/** A lane's KV saved to disk: the file holds llama.cpp's sequence state; the key and decode log stay here. */
export interface SpilledState {
  readonly file: string;
  readonly bytes: number;
  readonly tokens: number;
  readonly decodes: readonly Decode[];
}

interface Entry {
  state: SpilledState;
  /** Called when the budget pushes the state out, so its owner forgets it. */
  dropped: () => void;
  /** A shared prompt prefix: it yields to lanes (a cache somebody left and will come back to is worth more). */
  prefix: boolean;
}

/**
 * Sequence states spilled to files under a byte budget, least recently spilled dropped first. The files do
 * not record which weights produced them: whoever spills keeps the key beside the state.
 */
export class SpillStore {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  private counter = 0;

  private constructor(
    readonly dir: string,
    readonly budgetBytes: number,
    /** The base model's identity, in every file name: a state is only ever loaded into the model that wrote it. */
    private readonly baseTag: string,
    /** A folder of our own making is removed on dispose; a configured one only loses our files. */
    private readonly ownDir: boolean,
  ) {}

  /** A store in `dir`, or in a private temporary folder when none is given. */
  static open(dir: string | undefined, budgetBytes: number, baseTag: string): SpillStore {
    if (dir === undefined) return new SpillStore(mkdtempSync(join(tmpdir(), "weact-kv-")), budgetBytes, baseTag, true);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return new SpillStore(dir, budgetBytes, baseTag, false);
  }

  get usedBytes(): number {
    return this.bytes;
  }

  /**
   * Saves the sequence's state; undefined when it cannot fit the budget at all. Older states are dropped
   * to make room (their owners hear it through `dropped`); a shared prefix (`prefix`) only pushes out other
   * prefixes, and is not kept when that is not enough. Caller holds the sequence's lock.
   */
  async save(
    sequence: LlamaContextSequence,
    decodes: readonly Decode[],
    dropped: (state: SpilledState) => void,
    prefix = false,
  ): Promise<SpilledState | undefined> {
    if (this.budgetBytes <= 0 || sequence.nextTokenIndex === 0) return undefined;
    const file = join(this.dir, `${this.baseTag}-${process.pid}-${++this.counter}.kv`);
    let fileSize: number;
    try {
      ({ fileSize } = await sequence.saveStateToFile(file));
    } catch (err) {
      rmSync(file, { force: true });
      throw err;
    }
    const bytes = fileSize || statSync(file).size;
    if (bytes > this.budgetBytes) {
      rmSync(file, { force: true });
      return undefined;
    }
    const state: SpilledState = { file, bytes, tokens: sequence.nextTokenIndex, decodes };
    const movable = [...this.entries.values()].filter((e) => !prefix || e.prefix);
    if (prefix && this.bytes + bytes - movable.reduce((n, e) => n + e.state.bytes, 0) > this.budgetBytes) {
      rmSync(file, { force: true });
      return undefined;
    }
    this.entries.set(file, { state, dropped: () => dropped(state), prefix });
    this.bytes += bytes;
    for (const entry of movable) {
      if (this.bytes <= this.budgetBytes) break;
      this.remove(entry.state);
      entry.dropped();
    }
    return state;
  }

  /** Loads a state into an empty sequence and forgets it (the sequence holds it now). Caller holds the sequence's lock. */
  async restore(state: SpilledState, sequence: LlamaContextSequence): Promise<void> {
    // out of the LRU and the budget before the await: a save meanwhile can neither delete it nor count it
    if (this.entries.delete(state.file)) this.bytes -= state.bytes;
    try {
      await sequence.loadStateFromFile(state.file, { acceptRisk: true });
    } finally {
      rmSync(state.file, { force: true });
    }
  }

  /**
   * Loads a state into an empty sequence and keeps it (a shared prompt prefix: one state, many lanes), now the
   * most recently used. False when the budget pushed it out meanwhile. Caller holds the sequence's lock.
   */
  async copyInto(state: SpilledState, sequence: LlamaContextSequence): Promise<boolean> {
    const entry = this.entries.get(state.file);
    if (!entry) return false;
    this.entries.delete(state.file);
    this.entries.set(state.file, entry);
    await sequence.loadStateFromFile(state.file, { acceptRisk: true });
    return true;
  }

  remove(state: SpilledState): void {
    if (!this.entries.delete(state.file)) return;
    this.bytes -= state.bytes;
    rmSync(state.file, { force: true });
  }

  dispose(): void {
    for (const { state } of this.entries.values()) rmSync(state.file, { force: true });
    this.entries.clear();
    this.bytes = 0;
    if (this.ownDir) rmSync(this.dir, { recursive: true, force: true });
  }
}
