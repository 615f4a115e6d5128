import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { readFacts, type Fact } from "../../training/pipeline/facts.js";
import { TRAINING_ENTITIES } from "../../training/pipeline/paths.js";

/** What README.md says, read by the tests that hold it to what the code does. */
export const readme = () => readFileSync(join(PACKAGE_ROOT, "README.md"), "utf8");

/** The README's first screen: everything before its "Connecting a client" section. */
export const firstScreen = () => readme().split("## Connecting a client")[0]!;

/** The address the SDK example connects to: where `npm start` listens. */
export const SDK_EXAMPLE_ADDRESS = "http://127.0.0.1:7331";

/** The SDK example of "Connecting a client": the JavaScript block of its SDK item, unindented. */
export function sdkExample(): { code: string; task: string } {
  const block = /- \*\*SDK\*\*[\s\S]*?\n( *)```js\n([\s\S]*?)\n\1```/.exec(readme());
  if (!block) throw new Error('README.md has no ```js block in its "- **SDK**" item');
  const code = block[2]!.replace(new RegExp(`^${block[1]}`, "gm"), "");
  const task = /task: "([^"]+)"/.exec(code)?.[1];
  if (!task) throw new Error(`the README's SDK example names no task:\n${code}`);
  return { code, task };
}

const facts = readFacts(TRAINING_ENTITIES);
const words = (s: string) => ` ${s.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, " ")} `;

/**
 * The fact of the demo's corpus a question asks for: the one whose entity and relation the question names (the
 * longest such, so "Yellow River" beats "River"), from the entity files the search corpus is written from.
 */
export function factAsked(question: string): Fact {
  const q = words(question);
  const named = facts.filter((f) => q.includes(words(f.entity)) && q.includes(words(f.relation)));
  const size = (f: Fact) => f.entity.length + f.relation.length;
  const best = named.filter((f) => size(f) === Math.max(...named.map(size)));
  if (best.length !== 1)
    throw new Error(
      `"${question}" names ${best.length ? best.map((f) => `the ${f.relation} of ${f.entity}`).join(" and ") : "no entity and relation"} of the demo's corpus (training/corpus/entities); the trained demo answers "What is the <relation> of <entity>?" about one of them`,
    );
  return best[0]!;
}
