import type { AdapterInfo, Engine } from "../../native/index.js";
import type { Logger } from "../log.js";
import type { LibraryEntry } from "./manifest.js";

/** A manifest entry and what became of it: resident in the engine, or refused with a reason. */
export interface LibraryAdapter {
  entry: LibraryEntry;
  info?: AdapterInfo;
  error?: string;
}

/**
 * The capability library: what the manifest lists, joined with what the engine made resident.
 * A broken adapter file is reported and left out; the rest of the library serves.
 */
export class AdapterLibrary {
  private constructor(private readonly adapters: Map<string, LibraryAdapter>) {}

  static async load(engine: Engine, entries: readonly LibraryEntry[], logger: Logger): Promise<AdapterLibrary> {
    const adapters = new Map<string, LibraryAdapter>();
    for (const entry of entries) {
      try {
        const info = await engine.addAdapter({ alias: entry.alias, filePath: entry.filePath, scale: entry.scale });
        adapters.set(entry.alias, { entry, info });
      } catch (err) {
        logger.error({ alias: entry.alias, file: entry.filePath, err: (err as Error).message }, "adapter left out of the library");
        adapters.set(entry.alias, { entry, error: (err as Error).message });
      }
    }
    return new AdapterLibrary(adapters);
  }

  /** Aliases that can be loaded now. */
  aliases(): string[] {
    return [...this.adapters.values()].filter((a) => a.info).map((a) => a.entry.alias);
  }

  get(alias: string): LibraryAdapter | undefined {
    return this.adapters.get(alias);
  }

  list(): LibraryAdapter[] {
    return [...this.adapters.values()];
  }
}
