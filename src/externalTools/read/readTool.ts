import { z } from "zod";
import type { ExternalTool } from "../ExternalTool.js";
import { htmlToText, truncateText } from "../htmlText.js";
import type { CorpusDocument } from "../search/documents.js";
import { fetchPage, ReadRefusedError, type FetchPolicy } from "./fetchPage.js";

export interface ReadOptions extends FetchPolicy {
  maxChars: number;
  /** A corpus document by id (from the embedded index), if there is one. */
  document: (id: string) => CorpusDocument | undefined;
}

export function readTool(opts: ReadOptions): ExternalTool {
  return {
    name: "read",
    title: "Read a document or page",
    // a URL is fetched from the web (corpus ids stay local)
    openWorld: true,
    description:
      "Read a search result by its id, or an http(s) URL, as clean text (truncated with a marker when long).",
    input: { id_or_url: z.string().min(1).max(4096).describe("A document id from search, or an http(s) URL.") },
    output: {
      id: z.string(),
      title: z.string(),
      text: z.string(),
      url: z.string().optional(),
      source: z.enum(["corpus", "web"]),
      truncated: z.boolean(),
      chars: z.number(),
    },
    modelParameters: { type: "object", properties: { id_or_url: { type: "string", minLength: 1 } } },
    timeoutMs: opts.timeoutMs + 1000,
    async run(args, signal) {
      const target = String(args.id_or_url);
      const doc = opts.document(target);
      let title: string, text: string, url: string | undefined, source: "corpus" | "web";
      if (doc) {
        ({ title, text, url } = doc);
        source = "corpus";
      } else {
        try {
          const page = await fetchPage(target, opts, signal);
          const isHtml = /html/i.test(page.contentType);
          const parsed = isHtml ? htmlToText(page.body) : { title: undefined, text: page.body };
          title = parsed.title ?? page.url;
          text = parsed.text;
          url = page.url;
          source = "web";
        } catch (err) {
          if (err instanceof ReadRefusedError) return { ok: false, error: `read refused: ${err.message}` };
          throw err;
        }
      }
      const cut = truncateText(text, opts.maxChars);
      return {
        ok: true,
        structured: {
          id: target,
          title,
          text: cut.text,
          ...(url ? { url } : {}),
          source,
          truncated: cut.truncated,
          chars: text.length,
        },
        forModel: `${title}\n\n${cut.text}`,
      };
    },
  };
}
