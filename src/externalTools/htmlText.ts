import { convert } from "html-to-text";

/** Readable text of an HTML page (html-to-text), without navigation, scripts, styles or images. */
export function htmlToText(html: string): { title: string | undefined; text: string } {
  const title = /<title[^>]*>([\s\S]*?)<\/title>/i.exec(html)?.[1]?.replace(/\s+/g, " ").trim();
  const text = convert(html, {
    wordwrap: false,
    selectors: [
      { selector: "nav", format: "skip" },
      { selector: "header", format: "skip" },
      { selector: "footer", format: "skip" },
      { selector: "script", format: "skip" },
      { selector: "style", format: "skip" },
      { selector: "img", format: "skip" },
      { selector: "a", options: { ignoreHref: true } },
      { selector: "h1", options: { uppercase: false } },
      { selector: "h2", options: { uppercase: false } },
      { selector: "h3", options: { uppercase: false } },
    ],
  });
  return { title: title || undefined, text: text.replace(/\n{3,}/g, "\n\n").trim() };
}

/** Cuts `text` to `max` characters with a marker saying so. */
export function truncateText(text: string, max: number): { text: string; truncated: boolean } {
  if (text.length <= max) return { text, truncated: false };
  return { text: `${text.slice(0, max)}\n[... truncated at ${max} of ${text.length} characters ...]`, truncated: true };
}
