import { cpSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { DEFAULT_CORPUS } from "../../src/paths.js";
import { corpusFiles, counterfactual, type Fact } from "./facts.js";
import type { TrainingRun } from "./run.js";

/** The shipped corpus's entity files, and the counterfactual corpus: the shipped one with every entity fact edited. */
export function writeCorpora(run: TrainingRun, facts: readonly Fact[]): void {
  const { out, library } = run;
  rmSync(join(DEFAULT_CORPUS, "entities"), { recursive: true, force: true });
  mkdirSync(join(DEFAULT_CORPUS, "entities"), { recursive: true });
  for (const [file, text] of Object.entries(corpusFiles(facts))) writeFileSync(join(DEFAULT_CORPUS, file), text);
  writeEditedCorpus(library.counterfactualCorpus, counterfactual(facts));
  // `weact-mcp eval OUT/eval-counterfactual.jsonl --config OUT/counterfactual.json`: its paths are the library's own,
  // so it evaluates the library beside it wherever --out put it
  const config = {
    model: { path: relative(out, library.model) },
    adapters: { manifest: relative(out, library.manifest) },
    tools: {
      search: {
        corpus: relative(out, library.counterfactualCorpus),
        indexFile: relative(out, join(run.work, "search-index-counterfactual.json")),
      },
    },
  };
  writeFileSync(library.counterfactualConfig, `${JSON.stringify(config, null, 2)}\n`);
}

/** A copy of the shipped corpus at `dir` whose entity files state `facts` (edited values) instead. */
export function writeEditedCorpus(dir: string, facts: readonly Fact[]): void {
  rmSync(dir, { recursive: true, force: true });
  cpSync(DEFAULT_CORPUS, dir, { recursive: true });
  for (const [file, text] of Object.entries(corpusFiles(facts))) writeFileSync(join(dir, file), text);
}
