import type { SeededRandom } from "../../src/demo/random.js";
import type { TokenId } from "../../src/engine/index.js";
import { sentence, type Fact } from "./facts.js";
import type { TokenSample } from "./samples.js";

/**
 * The base's pretraining: reading what the context says. A trained LLM arrives able to look things up in its
 * prompt; the demo base starts from random weights, and LoRA adapters on such a base do not learn in-context
 * lookup from the few thousand stage windows there are (the adapters of a base trained on its own turns alone
 * reached 75-82% of their targets, short of copying entities and values). So the base first learns recall over
 * text shaped like the corpus: a window states facts whose values are drawn at random from their relation's
 * values (so no value can be memorised, only read), then restates some of them, and only the restatements are
 * targets. Half the restatements repeat the sentence, half name the relation and entity and give the value, as
 * the search stage's evidence and the write stage's answer do. Every entity and value of the corpus appears
 * (so a name the stages never saw is still one the model can copy), never in a true statement: what the
 * corpus says about the entities held out of training stays unseen.
 */
export function recallSamples(
  facts: readonly Fact[],
  tokenize: (text: string) => TokenId[],
  rng: SeededRandom,
  count: number,
  stated = 12,
  recalled = 6,
): TokenSample[] {
  const values = new Map<string, string[]>();
  for (const f of facts) values.set(f.relation, [...(values.get(f.relation) ?? []), f.value]);
  const truth = new Set(facts.map((f) => `${f.relation}/${f.entity}/${f.value}`));
  return Array.from({ length: count }, () => {
    // distinct (relation, entity) pairs: a restatement has one right value
    const chosen = new Map<string, Fact>();
    while (chosen.size < stated) {
      const f = rng.pick(facts);
      const value = rng.pick(values.get(f.relation)!);
      if (!truth.has(`${f.relation}/${f.entity}/${value}`)) chosen.set(`${f.relation}/${f.entity}`, { ...f, value });
    }
    const shown = [...chosen.values()];
    const context = tokenize(shown.map(sentence).join(" "));
    const restated = Array.from({ length: recalled }, () => {
      const f = rng.pick(shown);
      return rng.next() < 0.5 ? ` ${sentence(f)}` : `\n${f.relation} of ${f.entity}: ${f.value}`;
    });
    const targets = tokenize(restated.join(""));
    const mask = new Uint8Array(context.length + targets.length);
    mask.fill(1, context.length);
    return { tokens: [...context, ...targets], mask };
  });
}

/**
 * Copy windows: a list of the corpus's names and values in random order, then the same list again, with the
 * repetition as targets. Every stage reads its task's names out of its context (plan and the search query copy
 * the entity, write copies the value); recall alone wears that skill away (a copy-trained base fell from 100% to
 * 0% on held-out copy windows after one recall epoch, and kept 100% with these windows mixed in).
 */
export function copySamples(
  facts: readonly Fact[],
  tokenize: (text: string) => TokenId[],
  rng: SeededRandom,
  count: number,
  length = 12,
): TokenSample[] {
  const names = [...new Set(facts.flatMap((f) => [f.entity, f.value]))];
  return Array.from({ length: count }, () => {
    const list = Array.from({ length }, () => rng.pick(names)).join(", ");
    const context = tokenize(`${list}\n`);
    const targets = tokenize(list);
    const mask = new Uint8Array(context.length + targets.length);
    mask.fill(1, context.length);
    return { tokens: [...context, ...targets], mask };
  });
}
