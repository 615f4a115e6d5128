import { watch, type FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import type { AdapterInfo, Engine } from "../engine/index.js";
import { Mutex } from "../mutex.js";
import { checkInvocation, invocationOf } from "./loadExchange.js";
import type { Logger } from "../log.js";
import {
  describeIssues,
  ManifestEntrySchema,
  loadManifest,
  manifestStamp,
  sameStamp,
  saveManifest,
  type ManifestStamp,
  type AdapterFields,
  type LibraryEntry,
} from "./manifest.js";
import { AdapterCopies } from "./AdapterCopies.js";
import { EntryCopies } from "./EntryCopies.js";
import { AdapterBaseMismatchError, LibraryChangeError } from "./errors.js";

export { AdapterBaseMismatchError, AdapterInvocationError, AdapterPathError, LibraryChangeError } from "./errors.js";

/** A manifest entry and what became of it: resident in the engine, or refused with a reason. */
export interface LibraryAdapter {
  entry: LibraryEntry;
  info?: AdapterInfo;
  error?: string;
}

/** An admin change applied to the running library whose manifest write failed: live until a restart, not kept. */
export class ManifestNotSavedError extends LibraryChangeError {
  readonly code = "manifest_not_saved";
  constructor(
    readonly file: string,
    reason: string,
  ) {
    super(
      `the change is live but the manifest ${file} was not saved (${reason}), so a restart loses it; make adapters.manifest writable: the next change writes the whole library`,
    );
    this.name = "ManifestNotSavedError";
  }
}

export interface ManifestDiff {
  added: string[];
  refreshed: string[];
  removed: string[];
  updated: string[];
  failed: { alias: string; error: string }[];
}

/**
 * The capability library: what the manifest lists, joined with what the engine made resident, changeable
 * while the server runs (register, refresh, unregister, or an edit of the watched manifest). A broken
 * adapter is reported and left out; the rest of the library keeps serving. Listeners hear every change
 * (the MCP servers update the load_lora enum and notify clients).
 */
export class AdapterLibrary {
  /**
   * Every change, one at a time in the order asked: admin calls (with their manifest write) and manifest reloads
   * alike. A reload reads the manifest only when its turn comes, so it can never bring back a state that a later
   * change replaced (it once read the file first and applied it after the changes that had queued meanwhile).
   */
  private readonly changes = new Mutex();
  private readonly listeners = new Set<() => void>();
  /** The manifest file as this library last wrote it: the watcher does not apply the library's own writes. */
  private written: ManifestStamp | undefined;

  private constructor(
    private readonly engine: Engine,
    private readonly adapters: Map<string, LibraryAdapter>,
    /** The manifest the library was read from: changes made through it are written back there. */
    private readonly manifestPath: string,
    private readonly logger: Logger,
    /** The private copies the engine loads: the bytes checked, hashed and loaded are one and the same. */
    private readonly copies: EntryCopies,
  ) {}

  static async load(
    engine: Engine,
    entries: readonly LibraryEntry[],
    logger: Logger,
    opts: { manifestPath: string; allowedDirs: readonly string[] },
  ): Promise<AdapterLibrary> {
    await AdapterCopies.sweep();
    const copies = new EntryCopies(opts.allowedDirs, dirname(opts.manifestPath));
    const library = new AdapterLibrary(engine, new Map(), opts.manifestPath, logger, copies);
    for (const entry of entries) await library.add(entry);
    await library.tidy();
    return library;
  }

  /** Aliases that can be loaded now. */
  aliases(): string[] {
    return [...this.adapters.values()].filter((a) => a.info).map((a) => a.entry.alias);
  }

  /**
   * The loaded adapters the model is offered (load_lora's catalogue, a workflow's stages, the `static` set): a static
   * merge is none of them, it stands for several at once and runs as a policy (`static:<method>`, `single:<alias>`).
   */
  capabilities(): LibraryAdapter[] {
    return this.list().filter((a) => a.info && !a.entry.merge);
  }

  get(alias: string): LibraryAdapter | undefined {
    return this.adapters.get(alias);
  }

  list(): LibraryAdapter[] {
    return [...this.adapters.values()];
  }

  /** Versions still in memory because a session has them active, though their alias moved on or left. */
  retiredVersions(): AdapterInfo[] {
    const current = new Set(this.list().flatMap((a) => (a.info ? [a.info.id] : [])));
    return this.engine.residentVersions().filter((v) => !current.has(v.id));
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * The admin tools' changes, each written back to the manifest in the same turn of the queue (so it survives a
   * restart, and the file always holds the latest state). `fields` are a manifest entry's: the file relative to the
   * manifest's folder, checked by the manifest's own schema.
   */
  async registerEntry(fields: AdapterFields): Promise<AdapterInfo> {
    // an adapter registered on this server is recorded against the base it was checked and served on
    const entry = this.entryFrom({ ...fields, baseSha256: fields.baseSha256 ?? this.engine.model.sha256 });
    return this.change(async () => {
      const added = await this.register(entry);
      this.saveManifest();
      return added.info!;
    });
  }

  /** Changes the given fields of an entry (the others stay as they are); a new file or scale is a new version. */
  async refreshEntry(
    alias: string,
    fields: Partial<AdapterFields>,
  ): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    return this.change(async () => {
      // read in the queue: the fields left out keep the values of the change before, not of one read earlier
      const known = this.adapters.get(alias);
      if (!known) throw new LibraryChangeError(`no adapter "${alias}" to refresh`);
      const { filePath: _resolved, ...entry } = known.entry;
      const given = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined));
      const refreshed = await this.refresh(alias, this.entryFrom({ ...entry, ...given }));
      this.saveManifest();
      return refreshed;
    });
  }

  async unregisterEntry(alias: string): Promise<void> {
    return this.change(async () => {
      await this.unregister(alias);
      this.saveManifest();
    });
  }

  /** Adds a capability to the running server. */
  private async register(entry: LibraryEntry): Promise<LibraryAdapter> {
    if (this.adapters.get(entry.alias)?.info)
      throw new LibraryChangeError(
        `alias "${entry.alias}" is already in the library; use refresh_adapter to replace its file`,
      );
    const added = await this.add(entry);
    if (added.error) {
      this.adapters.delete(entry.alias);
      throw new LibraryChangeError(added.error);
    }
    return added;
  }

  /**
   * Points an alias at a new file (or scale, description, messages); sessions using the old version keep it until they
   * release it.
   */
  private async refresh(alias: string, entry: LibraryEntry): Promise<{ previous: AdapterInfo; current: AdapterInfo }> {
    const known = this.adapters.get(alias);
    if (!known?.info)
      throw new LibraryChangeError(
        `no adapter "${alias}" to refresh; the library has: ${this.aliases().join(", ") || "(none)"}`,
      );
    this.checkBase(entry);
    const { previous, current } = await this.copies.load(entry, async (spec) => {
      await this.checkInvocation(entry, spec.filePath);
      return this.engine.refreshAdapter(spec);
    });
    const named = this.named(current, entry);
    this.adapters.set(alias, { entry, info: named });
    return { previous: this.named(previous, known.entry), current: named };
  }

  /** Removes a capability; sessions that have it active keep it until they release it. */
  private async unregister(alias: string): Promise<AdapterInfo | undefined> {
    const known = this.adapters.get(alias);
    if (!known) throw new LibraryChangeError(`no adapter "${alias}" in the library`);
    this.adapters.delete(alias);
    return known.info ? this.engine.removeAdapter(alias) : undefined;
  }

  /** Brings the library to a manifest's entries: adds, refreshes (new file bytes or scale), updates texts, removes. */
  private async apply(entries: readonly LibraryEntry[]): Promise<ManifestDiff> {
    const diff: ManifestDiff = { added: [], refreshed: [], removed: [], updated: [], failed: [] };
    const wanted = new Map(entries.map((e) => [e.alias, e]));
    for (const alias of [...this.adapters.keys()]) {
      if (wanted.has(alias)) continue;
      try {
        await this.unregister(alias);
        diff.removed.push(alias);
      } catch (err) {
        diff.failed.push({ alias, error: (err as Error).message });
      }
    }
    for (const entry of entries) {
      try {
        const known = this.adapters.get(entry.alias);
        if (!known?.info) {
          if (known) this.adapters.delete(entry.alias);
          await this.register(entry);
          diff.added.push(entry.alias);
        } else if (
          resolve(known.entry.filePath) !== resolve(entry.filePath) ||
          known.entry.scale !== entry.scale ||
          (await this.copies.fileChanged(known.entry, known.info.sha256))
        ) {
          await this.refresh(entry.alias, entry);
          diff.refreshed.push(entry.alias);
        } else if (JSON.stringify(known.entry) !== JSON.stringify(entry)) {
          this.checkBase(entry);
          if (known.info.invocationTokens && this.engine.features.alora)
            checkInvocation(this.engine, entry, known.info.invocationTokens);
          this.adapters.set(entry.alias, { ...known, entry: { ...entry, filePath: known.entry.filePath } });
          diff.updated.push(entry.alias);
        }
      } catch (err) {
        diff.failed.push({ alias: entry.alias, error: (err as Error).message });
      }
    }
    return diff;
  }

  /** Re-reads the manifest when it changes; a malformed edit is logged and the running library is kept. */
  watch(): FSWatcher | undefined {
    const manifestPath = this.manifestPath;
    let timer: NodeJS.Timeout | undefined;
    try {
      // the folder, not the file: an atomic save (write + rename) replaces the file's inode
      const watcher = watch(dirname(manifestPath), { persistent: false }, (_event, name) => {
        if (name !== basename(manifestPath)) return;
        clearTimeout(timer);
        timer = setTimeout(() => void this.reload(), 150);
      });
      watcher.on("error", () => undefined);
      return watcher;
    } catch (err) {
      this.logger.warn(
        { manifest: manifestPath, err: (err as Error).message },
        "cannot watch the manifest; use the admin tools to change the library",
      );
      return undefined;
    }
  }

  /**
   * Applies the manifest as it is when this reload's turn in the queue comes, unless it is the library's own last
   * write (an admin change already applied it; applying it again would only hash every file once more).
   */
  private async reload(): Promise<void> {
    const manifestPath = this.manifestPath;
    const applied = await this.changes.run(async () => {
      try {
        // inside the try: a manifest that cannot even be stat'ed (a symlink loop) is a rejected edit, not a crash
        if (this.written && sameStamp(this.written, manifestStamp(manifestPath))) return false;
        const diff = await this.apply(loadManifest(manifestPath));
        await this.tidy();
        this.logger.info({ manifest: manifestPath, ...diff }, "adapter manifest applied");
        return true;
      } catch (err) {
        this.logger.error(
          { manifest: manifestPath, err: (err as Error).message },
          "adapter manifest edit rejected; the running library is kept",
        );
        return false;
      }
    });
    if (applied) this.notify();
  }

  /** An entry as the manifest would hold it (its schema names the field to fix), with its file resolved. */
  private entryFrom(fields: Record<string, unknown>): LibraryEntry {
    const parsed = ManifestEntrySchema.safeParse(fields);
    if (!parsed.success) throw new LibraryChangeError(describeIssues(parsed.error).join("; "));
    return { ...parsed.data, filePath: resolve(dirname(this.manifestPath), parsed.data.file) };
  }

  private saveManifest(): void {
    try {
      this.written = saveManifest(
        this.manifestPath,
        this.list().map((a) => a.entry),
      );
    } catch (err) {
      throw new ManifestNotSavedError(this.manifestPath, (err as Error).message);
    }
  }

  private async add(entry: LibraryEntry): Promise<LibraryAdapter> {
    try {
      const adapter = { entry, info: await this.addCopies(entry) };
      this.adapters.set(entry.alias, adapter);
      return adapter;
    } catch (err) {
      this.logger.error(
        { alias: entry.alias, file: entry.filePath, err: (err as Error).message },
        "adapter left out of the library",
      );
      const adapter = { entry, error: (err as Error).message };
      this.adapters.set(entry.alias, adapter);
      return adapter;
    }
  }

  /** The entry's copies given to the engine: the version it made, named by the entry's own file. */
  private async addCopies(entry: LibraryEntry): Promise<AdapterInfo> {
    this.checkBase(entry);
    const added = await this.copies.load(entry, async (spec) => {
      await this.checkInvocation(entry, spec.filePath);
      return this.engine.addAdapter(spec);
    });
    return this.named(added, entry);
  }

  /**
   * Refuses an activated LoRA whose load exchange, as the served model renders it with the entry's activation text,
   * does not hold its invocation sequence: it would apply nowhere (checked before the engine sees the file, so a
   * refusal changes nothing).
   */
  private async checkInvocation(entry: LibraryEntry, filePath: string): Promise<void> {
    // an engine that serves no aLoRA refuses the file itself, with that reason
    if (!this.engine.features.alora) return;
    const invocation = await invocationOf(filePath, this.engine.model.vocabularySize);
    if (invocation) checkInvocation(this.engine, entry, invocation);
  }

  /** Refuses an entry recorded for another base model than the one served (before any of its bytes are read). */
  private checkBase(entry: LibraryEntry): void {
    const served = this.engine.model;
    if (entry.baseSha256 !== undefined && entry.baseSha256 !== served.sha256)
      throw new AdapterBaseMismatchError(entry.alias, entry.baseSha256, {
        sha256: served.sha256,
        name: served.name ?? basename(served.filePath),
      });
  }

  /** The engine's version as the library shows it: named by the entry's file, not by the copy the engine loaded. */
  private named(info: AdapterInfo, entry: LibraryEntry): AdapterInfo {
    return { ...info, filePath: entry.filePath };
  }

  /** Removes the copies no version uses any more: none of the library's, none the engine still holds for a session. */
  private async tidy(): Promise<void> {
    const used = [...this.list().flatMap((a) => (a.info ? [a.info] : [])), ...this.engine.residentVersions()];
    await this.copies.keepOnly(new Set(used.map((info) => info.sha256)));
  }

  /**
   * Runs a change in its turn in the queue, then tells the listeners, even when it failed: a change whose manifest
   * write failed is live all the same (undoing it could fail too: the old file may be gone), and clients must see
   * what the library serves. A change refused before it applied only repeats the current state.
   */
  private async change<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await this.changes.run(async () => {
        try {
          return await fn();
        } finally {
          await this.tidy();
        }
      });
    } finally {
      this.notify();
    }
  }

  private notify(): void {
    for (const listener of this.listeners) listener();
  }
}
