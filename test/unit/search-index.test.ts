import { cpSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { DEFAULT_CORPUS } from "../../src/paths.js";
import { LocalIndex } from "../../src/externalTools/search/LocalIndex.js";
import { tempDir } from "../helpers/files.js";

const logger = createLogger("silent");
const opened: LocalIndex[] = [];
const open = (corpus: string, indexFile: string) => {
  const index = LocalIndex.open(corpus, indexFile, logger);
  opened.push(index);
  return index;
};
afterEach(() => opened.splice(0).forEach((i) => i.close()));

/** A private copy of the shipped corpus and a place for its index. */
function corpus() {
  const dir = join(tempDir(), "corpus");
  cpSync(DEFAULT_CORPUS, dir, { recursive: true });
  // a whole-millisecond mtime, so that putting it back after a rewrite restores it exactly
  const stamp = new Date("2026-01-01T00:00:00Z");
  utimesSync(join(dir, "geography", "seine.md"), stamp, stamp);
  return { dir, indexFile: join(tempDir(), "index.json") };
}

/** Rewrites a file with other text of the same length, and puts its mtime back: size and mtime unchanged. */
function sameStampRewrite(path: string, from: string, to: string) {
  const before = statSync(path);
  const text = readFileSync(path, "utf8");
  expect(to.length).toBe(from.length);
  expect(text).toContain(from);
  writeFileSync(path, text.replace(from, to));
  utimesSync(path, before.atime, before.mtime);
  expect(statSync(path).size).toBe(before.size);
  expect(statSync(path).mtimeMs).toBe(before.mtimeMs);
}

describe("local index: incremental re-indexing by size and mtime", () => {
  it("re-reads exactly the files whose size or mtime changed, and nothing else", async () => {
    const { dir, indexFile } = corpus();
    const index = open(dir, indexFile);
    const documents = index.size;
    expect(documents).toBeGreaterThan(5);
    expect(index.sync()).toEqual({ added: 0, updated: 0, removed: 0 });

    // a new mtime alone makes a file re-read
    const seine = join(dir, "geography", "seine.md");
    const later = new Date(statSync(seine).mtimeMs + 10_000);
    utimesSync(seine, later, later);
    expect(index.sync()).toEqual({ added: 0, updated: 1, removed: 0 });

    // other bytes with the same size and mtime are not looked at: the index still serves the old text
    sameStampRewrite(seine, "Paris", "Xyzzq");
    expect(index.sync()).toEqual({ added: 0, updated: 0, removed: 0 });
    expect((await index.search("Xyzzq", 5)).map((h) => h.id)).not.toContain("geography/seine.md");

    // a different size is re-read even with the mtime put back
    const before = statSync(seine);
    writeFileSync(seine, `${readFileSync(seine, "utf8")}\nQuuxbridge crosses it.\n`);
    utimesSync(seine, before.atime, before.mtime);
    expect(index.sync()).toEqual({ added: 0, updated: 1, removed: 0 });
    expect((await index.search("Quuxbridge", 5))[0]?.id).toBe("geography/seine.md");
    expect((await index.search("Xyzzq", 5))[0]?.id).toBe("geography/seine.md");
    expect(index.size).toBe(documents);
  });

  it("a restart loads the persisted index and re-reads only what changed while it was down", async () => {
    const { dir, indexFile } = corpus();
    open(dir, indexFile).close();
    const seine = join(dir, "geography", "seine.md");
    // changed while down, but with its size and mtime kept: a restart that re-read everything would see it
    sameStampRewrite(seine, "Paris", "Xyzzq");
    writeFileSync(join(dir, "added.md"), "# Zorblax\n\nZorblax is a mineral found only in test corpora.");
    const index = open(dir, indexFile);
    expect((await index.search("Xyzzq", 5)).map((h) => h.id)).not.toContain("geography/seine.md");
    expect((await index.search("Zorblax", 5))[0]?.id).toBe("added.md");
    expect(index.sync()).toEqual({ added: 0, updated: 0, removed: 0 });
  });
});
