import writeFileAtomic from "write-file-atomic";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, watch, type FSWatcher } from "node:fs";
import { dirname, extname, join, relative } from "node:path";
import MiniSearch from "minisearch";
import type { Logger } from "../../log.js";
import { CORPUS_EXTENSIONS, readCorpusFile, snippet, type CorpusDocument } from "./documents.js";
import type { SearchBackend, SearchHit } from "./types.js";

const FORMAT_VERSION = 1;
const INDEX_OPTIONS = {
  idField: "id",
  fields: ["title", "text"],
  storeFields: ["title"],
  searchOptions: { boost: { title: 2 }, prefix: true, fuzzy: 0.15, combineWith: "OR" as const },
};

interface FileStamp {
  mtimeMs: number;
  size: number;
  ids: string[];
}

interface Persisted {
  version: number;
  corpus: string;
  files: Record<string, FileStamp>;
  docs: Record<string, CorpusDocument>;
  index: unknown;
}

/**
 * The embedded search backend: a MiniSearch (BM25+) full-text index over a folder of markdown, text, HTML and
 * JSONL documents, persisted to disk and brought up to date incrementally: only files whose size or mtime
 * changed are re-read. A file watcher marks the index stale; the next search syncs it first.
 */
export class LocalIndex implements SearchBackend {
  readonly name = "local";
  private stale = true;
  private watcher: FSWatcher | undefined;

  private constructor(
    private readonly corpusDir: string,
    private readonly indexFile: string,
    private index: MiniSearch<CorpusDocument>,
    private files: Record<string, FileStamp>,
    private docs: Map<string, CorpusDocument>,
    private readonly logger: Logger,
  ) {}

  static open(corpusDir: string, indexFile: string, logger: Logger): LocalIndex {
    const persisted = LocalIndex.load(indexFile, corpusDir, logger);
    const index = persisted
      ? MiniSearch.loadJSON<CorpusDocument>(JSON.stringify(persisted.index), INDEX_OPTIONS)
      : new MiniSearch<CorpusDocument>(INDEX_OPTIONS);
    const local = new LocalIndex(
      corpusDir,
      indexFile,
      index,
      persisted?.files ?? {},
      new Map(Object.entries(persisted?.docs ?? {})),
      logger,
    );
    local.sync();
    local.watcher = LocalIndex.tryWatch(corpusDir, () => (local.stale = true), logger);
    return local;
  }

  /** Brings the index up to date with the folder; returns what changed. */
  sync(): { added: number; updated: number; removed: number } {
    const seen = new Set<string>();
    let added = 0,
      updated = 0,
      removed = 0;
    for (const path of walk(this.corpusDir)) {
      const rel = relative(this.corpusDir, path);
      seen.add(rel);
      const st = statSync(path);
      const known = this.files[rel];
      if (known && known.mtimeMs === st.mtimeMs && known.size === st.size) continue;
      if (known) this.forget(rel);
      try {
        const docs = readCorpusFile(path, rel);
        for (const doc of docs) {
          if (this.docs.has(doc.id)) continue; // a duplicate id keeps its first document
          this.index.add(doc);
          this.docs.set(doc.id, doc);
        }
        this.files[rel] = { mtimeMs: st.mtimeMs, size: st.size, ids: docs.map((d) => d.id) };
      } catch (err) {
        this.logger.warn({ file: rel, err: (err as Error).message }, "corpus file skipped");
        this.files[rel] = { mtimeMs: st.mtimeMs, size: st.size, ids: [] };
      }
      if (known) updated++;
      else added++;
    }
    for (const rel of Object.keys(this.files)) {
      if (!seen.has(rel)) {
        this.forget(rel);
        delete this.files[rel];
        removed++;
      }
    }
    this.stale = false;
    if (added || updated || removed) {
      this.persist();
      this.logger.info(
        { corpus: this.corpusDir, added, updated, removed, documents: this.docs.size },
        "search index updated",
      );
    }
    return { added, updated, removed };
  }

  async search(query: string, topK: number): Promise<SearchHit[]> {
    if (this.stale) this.sync();
    return this.index
      .search(query)
      .slice(0, topK)
      .map((r) => {
        const doc = this.docs.get(String(r.id))!;
        return {
          id: doc.id,
          title: doc.title,
          snippet: snippet(doc.text, query),
          score: Number(r.score.toFixed(4)),
          ...(doc.url ? { url: doc.url } : {}),
        };
      });
  }

  /** A document by the id a search returned. */
  document(id: string): CorpusDocument | undefined {
    if (this.stale) this.sync();
    return this.docs.get(id);
  }

  get size(): number {
    return this.docs.size;
  }

  close(): void {
    this.watcher?.close();
  }

  private forget(rel: string) {
    for (const id of this.files[rel]?.ids ?? []) {
      if (this.docs.delete(id)) this.index.discard(id);
    }
  }

  private persist() {
    const data: Persisted = {
      version: FORMAT_VERSION,
      corpus: this.corpusDir,
      files: this.files,
      docs: Object.fromEntries(this.docs),
      index: this.index.toJSON(),
    };
    mkdirSync(dirname(this.indexFile), { recursive: true });
    writeFileAtomic.sync(this.indexFile, JSON.stringify(data)); // never leave a half-written index behind
  }

  private static load(indexFile: string, corpusDir: string, logger: Logger): Persisted | undefined {
    if (!existsSync(indexFile)) return undefined;
    try {
      const data = JSON.parse(readFileSync(indexFile, "utf8")) as Persisted;
      if (data.version === FORMAT_VERSION && data.corpus === corpusDir) return data;
    } catch (err) {
      logger.warn({ indexFile, err: (err as Error).message }, "search index unreadable; rebuilding it");
    }
    return undefined;
  }

  private static tryWatch(dir: string, onChange: () => void, logger: Logger): FSWatcher | undefined {
    try {
      const w = watch(dir, { recursive: true, persistent: false }, onChange);
      w.on("error", () => undefined);
      return w;
    } catch (err) {
      logger.warn(
        { dir, err: (err as Error).message },
        "cannot watch the corpus; changes are picked up on restart or sync",
      );
      return undefined;
    }
  }
}

function* walk(dir: string): Generator<string> {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    if (entry.name.startsWith(".")) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else if (entry.isFile() && CORPUS_EXTENSIONS.has(extname(entry.name).toLowerCase())) yield path;
  }
}
