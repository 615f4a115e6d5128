import { readFileSync } from "node:fs";
import { extname } from "node:path";
import { htmlToText } from "../htmlText.js";

/** One searchable document; a file yields one, a JSONL file one per line. */
export interface CorpusDocument {
  id: string;
  title: string;
  text: string;
  /** The file it came from, relative to the corpus folder. */
  source: string;
  url?: string;
}

export const CORPUS_EXTENSIONS = new Set([".md", ".markdown", ".txt", ".html", ".htm", ".jsonl"]);

export class CorpusFileError extends Error {
  constructor(
    readonly file: string,
    readonly reason: string,
  ) {
    super(`${file}: ${reason}`);
    this.name = "CorpusFileError";
  }
}

function firstLineTitle(text: string, fallback: string): { title: string; body: string } {
  const lines = text.split(/\r?\n/);
  const first = lines.findIndex((l) => l.trim());
  if (first < 0) return { title: fallback, body: "" };
  const title = lines[first]!.replace(/^#+\s*/, "").trim();
  return {
    title: title || fallback,
    body: lines
      .slice(first + 1)
      .join("\n")
      .trim(),
  };
}

/** Parses one corpus file; `relative` is its path inside the corpus and the base of its ids. */
export function readCorpusFile(path: string, relative: string): CorpusDocument[] {
  const raw = readFileSync(path, "utf8");
  const ext = extname(path).toLowerCase();
  if (ext === ".jsonl") {
    return raw.split(/\r?\n/).flatMap((line, i) => {
      if (!line.trim()) return [];
      let row: Record<string, unknown>;
      try {
        row = JSON.parse(line);
      } catch {
        throw new CorpusFileError(relative, `line ${i + 1} is not JSON`);
      }
      const text = [row.text, row.content, row.body].find((v) => typeof v === "string") as string | undefined;
      if (!text) throw new CorpusFileError(relative, `line ${i + 1} has no text, content or body field`);
      const id = typeof row.id === "string" || typeof row.id === "number" ? String(row.id) : String(i + 1);
      return [
        {
          id: `${relative}#${id}`,
          title: typeof row.title === "string" ? row.title : id,
          text,
          source: relative,
          ...(typeof row.url === "string" ? { url: row.url } : {}),
        },
      ];
    });
  }
  if (ext === ".html" || ext === ".htm") {
    const { title, text } = htmlToText(raw);
    return [{ id: relative, title: title ?? relative, text, source: relative }];
  }
  const { title, body } = firstLineTitle(raw, relative);
  return [{ id: relative, title, text: body, source: relative }];
}

/**
 * A short excerpt for display (ranking is the index's job), starting at the sentence that holds the most distinct
 * query terms (the earliest of equals): on a document of many facts about one subject, the fact asked about is
 * the one shown first, not the document's opening.
 */
export function snippet(text: string, query: string, width = 240): string {
  const terms = [
    ...new Set(
      query
        .toLowerCase()
        .split(/\W+/)
        .filter((t) => t.length > 2),
    ),
  ];
  let start = 0;
  let best = 0;
  for (const m of text.matchAll(/[^.!?]+[.!?]*/g)) {
    const lower = m[0].toLowerCase();
    const held = terms.filter((t) => lower.includes(t)).length;
    if (held > best) [best, start] = [held, m.index + m[0].length - m[0].trimStart().length];
  }
  const piece = text
    .slice(start, start + width)
    .replace(/\s+/g, " ")
    .trim();
  return `${start > 0 ? "…" : ""}${piece}${start + width < text.length ? "…" : ""}`;
}
