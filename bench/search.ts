import { readdirSync, statSync } from "node:fs";
import { extname, join, relative } from "node:path";
import { Index } from "flexsearch";
import MiniSearch from "minisearch";
import { CORPUS_EXTENSIONS, readCorpusFile, type CorpusDocument } from "../src/tools/search/documents.js";
import { fmt, quantile } from "./stats.js";

/** Known queries over the shipped corpus and the document each should rank first. */
export const KNOWN_QUERIES: [string, string][] = [
  ["second longest river in Europe", "geography/danube.txt"],
  ["first woman to win a Nobel Prize", "science/people.jsonl#marie-curie"],
  ["Challenger Deep", "geography/mariana-trench.txt"],
  ["three-way handshake", "computing/tcp.md"],
  ["stale cache after weights change", "computing/kv-cache.md"],
  ["Gustave Eiffel World's Fair", "geography/landmarks.html"],
  ["Bernoulli numbers program", "science/people.jsonl#ada-lovelace"],
  ["Blue Nile Lake Tana", "geography/nile.md"],
];

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
export function compareIndexes(corpusDir: string, reps = 200) {
  const docs = corpusDocuments(corpusDir);
  const rows = [];
  {
    const t = performance.now();
    const mini = new MiniSearch<CorpusDocument>({ fields: ["title", "text"], searchOptions: { boost: { title: 2 }, prefix: true, fuzzy: 0.15 } });
    mini.addAll(docs);
    const build = performance.now() - t;
    const lat: number[] = [];
    let hits = 0;
    for (let r = 0; r < reps; r++) {
      for (const [q, id] of KNOWN_QUERIES) {
        const s = performance.now();
        const top = mini.search(q)[0]?.id;
        lat.push(performance.now() - s);
        if (r === 0 && top === id) hits++;
      }
    }
    rows.push({ library: "minisearch", documents: docs.length, buildMs: fmt(build), queryP50Us: fmt(quantile(lat, 0.5) * 1000, 1), top1: `${hits}/${KNOWN_QUERIES.length}` });
  }
  {
    const t = performance.now();
    const flex = new Index({ tokenize: "forward" });
    docs.forEach((d, i) => flex.add(i, `${d.title} ${d.text}`));
    const build = performance.now() - t;
    const lat: number[] = [];
    let hits = 0;
    for (let r = 0; r < reps; r++) {
      for (const [q, id] of KNOWN_QUERIES) {
        const s = performance.now();
        const top = (flex.search(q, { limit: 5 }) as number[])[0];
        lat.push(performance.now() - s);
        if (r === 0 && top !== undefined && docs[top]!.id === id) hits++;
      }
    }
    rows.push({ library: "flexsearch", documents: docs.length, buildMs: fmt(build), queryP50Us: fmt(quantile(lat, 0.5) * 1000, 1), top1: `${hits}/${KNOWN_QUERIES.length}` });
  }
  return rows;
}
