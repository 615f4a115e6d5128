import { readdirSync, statSync } from "node:fs";
import { extname, join, relative } from "node:path";
import { Index } from "flexsearch";
import MiniSearch from "minisearch";
import { CORPUS_EXTENSIONS, readCorpusFile, type CorpusDocument } from "../src/externalTools/search/documents.js";
import { fmt, quantile } from "./stats.js";
import { KNOWN_QUERIES } from "../testkit/knownQueries.js";

function corpusDocuments(dir: string): CorpusDocument[] {
  const out: CorpusDocument[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (CORPUS_EXTENSIONS.has(extname(name))) out.push(...readCorpusFile(p, relative(dir, p)));
    }
  };
  walk(dir);
  return out;
}

/**
 * The measurement behind the choice of index library: build time, query latency and top-1 hits on the
 * known queries, MiniSearch (BM25+, multi-field) vs FlexSearch (its single-field Index; its Document index
 * returns per-field lists that would need hand-written merging).
 */
interface Candidate {
  library: string;
  build: (docs: CorpusDocument[]) => void;
  /** The id of the top hit. */
  top: (query: string) => string | undefined;
}

function measure(index: Candidate, docs: CorpusDocument[], reps: number) {
  const t = performance.now();
  index.build(docs);
  const build = performance.now() - t;
  const lat: number[] = [];
  let hits = 0;
  for (let r = 0; r < reps; r++) {
    for (const [q, id] of KNOWN_QUERIES) {
      const s = performance.now();
      const top = index.top(q);
      lat.push(performance.now() - s);
      if (r === 0 && top === id) hits++;
    }
  }
  return {
    library: index.library,
    documents: docs.length,
    buildMs: fmt(build),
    queryP50Us: fmt(quantile(lat, 0.5) * 1000, 1),
    top1: `${hits}/${KNOWN_QUERIES.length}`,
  };
}

/**
 * The measurement behind the choice of index library: build time, query latency and top-1 hits on the
 * known queries, MiniSearch (BM25+, multi-field) vs FlexSearch (its single-field Index; its Document index
 * returns per-field lists that would need hand-written merging).
 */
export function compareIndexes(corpusDir: string, reps = 200) {
  const docs = corpusDocuments(corpusDir);
  const mini = new MiniSearch<CorpusDocument>({
    fields: ["title", "text"],
    searchOptions: { boost: { title: 2 }, prefix: true, fuzzy: 0.15 },
  });
  const flex = new Index({ tokenize: "forward" });
  return [
    measure(
      { library: "minisearch", build: (d) => mini.addAll(d), top: (q) => mini.search(q)[0]?.id as string | undefined },
      docs,
      reps,
    ),
    measure(
      {
        library: "flexsearch",
        build: (d) => d.forEach((x, i) => flex.add(i, `${x.title} ${x.text}`)),
        top: (q) => docs[(flex.search(q, { limit: 5 }) as number[])[0] ?? -1]?.id,
      },
      docs,
      reps,
    ),
  ];
}
