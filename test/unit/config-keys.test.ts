import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ConfigSchema } from "../../src/config/configSchema.js";
import { PACKAGE_ROOT } from "../../src/paths.js";

/**
 * Messages and docs that name a setting must name a real one: every dotted config key in the source's strings
 * and comments, and in the docs' code spans, must resolve in the zod config schema.
 */
const SECTIONS = new Set(Object.keys(ConfigSchema.shape));
/** A dotted path of identifiers, not a property access in code (no leading dot) nor a call. */
const DOTTED = /(?<![\w.$/-])[a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)+(?![\w(])/g;
const FILE_EXTENSIONS = new Set(["ts", "js", "json", "jsonl", "md", "svg", "gguf", "txt", "html", "jinja", "py"]);

const unwrap = (schema: z.ZodType): z.ZodType | undefined =>
  (schema as unknown as { unwrap?: () => z.ZodType }).unwrap?.() ??
  (schema as unknown as { _zod: { def: { innerType?: z.ZodType } } })._zod.def.innerType;

/** Every key name anywhere in the schema: a dotted path ending in one is meant as a setting. */
function settingNames(schema: z.ZodType, into = new Set<string>()): Set<string> {
  let s: z.ZodType | undefined = schema;
  while (s && !(s instanceof z.ZodObject)) s = unwrap(s);
  if (!s) return into;
  for (const [key, inner] of Object.entries((s as z.ZodObject).shape)) {
    into.add(key);
    settingNames(inner as z.ZodType, into);
  }
  return into;
}
const NAMES = settingNames(ConfigSchema);

/** The schema under a dotted path, or undefined when the path names no setting. */
function resolveKey(path: string): z.ZodType | undefined {
  let schema: z.ZodType = ConfigSchema;
  for (const part of path.split(".")) {
    while (!(schema instanceof z.ZodObject)) {
      const inner = unwrap(schema);
      if (!inner) return undefined;
      schema = inner;
    }
    const next = (schema as z.ZodObject).shape[part] as z.ZodType | undefined;
    if (!next) return undefined;
    schema = next;
  }
  return schema;
}

/** The text of a TypeScript file's string literals and comments: where messages and explanations name settings. */
export function proseOf(source: string): string {
  const out: string[] = [];
  let i = 0;
  while (i < source.length) {
    const two = source.slice(i, i + 2);
    if (two === "//" || two === "/*") {
      const end = two === "//" ? source.indexOf("\n", i) : source.indexOf("*/", i) + 2;
      const stop = end <= 0 ? source.length : end;
      out.push(source.slice(i, stop));
      i = stop;
    } else if (`"'\``.includes(source[i]!)) {
      const quote = source[i]!;
      let j = i + 1;
      let text = "";
      while (j < source.length && source[j] !== quote) {
        if (quote === "`" && source.startsWith("${", j)) {
          // an interpolation is code, not prose: skip it (braces balanced)
          let depth = 0;
          j++;
          do depth += source[j] === "{" ? 1 : source[j] === "}" ? -1 : 0;
          while (++j < source.length && depth > 0);
          text += " ";
          continue;
        }
        const step = source[j] === "\\" ? 2 : 1;
        text += source.slice(j, j + step);
        j += step;
      }
      out.push(text);
      i = j + 1;
    } else i++;
  }
  return out.join("\n");
}

const codeSpans = (markdown: string) => [...markdown.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]).join("\n");

/**
 * Dotted config keys named in `text` that the schema does not have. A dotted path is meant as a setting when
 * it starts with a config section or ends with a setting's name (so `engine.contextSize` is caught too).
 */
export function unknownKeys(text: string): string[] {
  const meant = (path: string) => {
    const parts = path.split(".");
    if (FILE_EXTENSIONS.has(parts.at(-1)!)) return false;
    // a camelCase leaf (contextSize, maxContexts) is a setting's name; plain words (path, tokens) are not enough
    return SECTIONS.has(parts[0]!) || (NAMES.has(parts.at(-1)!) && /[A-Z]/.test(parts.at(-1)!));
  };
  return [...new Set([...text.matchAll(DOTTED)].map((m) => m[0]))].filter((key) => meant(key) && !resolveKey(key));
}

function files(dir: string, ext: RegExp): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path, ext) : ext.test(name) ? [path] : [];
  });
}

describe("config keys named in messages and docs", () => {
  it("resolves known keys through defaults and nesting, and rejects invented ones", () => {
    expect(resolveKey("model.contextSize")).toBeDefined();
    expect(resolveKey("tools.search.searxng.url")).toBeDefined();
    expect(resolveKey("harness.stage.noToolTurns")).toBeDefined();
    expect(resolveKey("engine.contextSize")).toBeUndefined();
    expect(resolveKey("model.contextsize")).toBeUndefined();
    // the messages the engine's errors (src/engine/errors.ts, then the local engine's errors.ts) had before this test
    // existed
    expect(unknownKeys("shorten the history or raise engine.contextSize")).toEqual(["engine.contextSize"]);
    expect(unknownKeys("close a session or raise engine.maxContexts / engine.sequencesPerContext")).toEqual([
      "engine.maxContexts",
      "engine.sequencesPerContext",
    ]);
    expect(unknownKeys("raise model.contextSize; see cache.ts and session.id")).toEqual([]);
    expect(
      proseOf("throw new Error(`raise model.contextSize`); // see cache.strategy\nconst x = model.tokenizer;"),
    ).toMatch(/model\.contextSize[\s\S]*cache\.strategy/);
    expect(proseOf("const x = model.tokenizer;")).not.toMatch(/model\.tokenizer/);
  });

  it("every dotted key in the source's strings and comments and in the docs names a real setting", () => {
    const sources = files(join(PACKAGE_ROOT, "src"), /\.ts$/); // the local engine included (src/engines/local)
    const docs = [
      join(PACKAGE_ROOT, "README.md"),
      join(PACKAGE_ROOT, "CONTRIBUTING.md"),
      join(PACKAGE_ROOT, "bench", "README.md"),
      ...files(join(PACKAGE_ROOT, "docs"), /\.md$/),
    ];
    const found: string[] = [];
    for (const file of sources)
      for (const key of unknownKeys(proseOf(readFileSync(file, "utf8"))))
        found.push(`${relative(PACKAGE_ROOT, file)}: ${key}`);
    for (const file of docs)
      for (const key of unknownKeys(codeSpans(readFileSync(file, "utf8"))))
        found.push(`${relative(PACKAGE_ROOT, file)}: ${key}`);
    expect(found).toEqual([]);
  });
});
