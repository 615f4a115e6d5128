import type { CallSyntax, JsonSchemaObject } from "../../../engine/index.js";

/**
 * The function-calling grammar of one remote turn, as one GBNF text (llama.cpp's format; vLLM and SGLang take the
 * same through xgrammar). It is the local engine's behaviour in a single request: free text until the chat
 * template's call trigger appears, then exactly one call of a callable function, its arguments constrained by
 * node-llama-cpp's JSON-schema grammar, then the call's suffix and the end of the turn. Every text rule only
 * accepts complete characters, so the engine never has invalid UTF-8 to send back.
 */

/**
 * The grammar of requests that only need the next-token distribution: one complete ASCII character, so the
 * distribution is the raw one, and no token that ends inside a character is dropped from llama-server's answer.
 */
export const ONE_CHARACTER = "root ::= [\\x09\\x0a\\x20-\\x7e]+";

const HEX_DIGIT = /[0-9A-Fa-f]/;

/**
 * A GBNF string literal. A hex digit right after an escape is escaped too: xgrammar (vLLM, SGLang) reads `\x`
 * greedily, so "\x01a" would be the one character U+01A there, where llama.cpp reads two.
 */
export function gbnfLiteral(value: string): string {
  let out = '"';
  let afterEscape = false;
  for (const ch of value) {
    const code = ch.codePointAt(0)!;
    const hexEscape: boolean =
      !'"\\\n\r\t'.includes(ch) && (code < 0x20 || code === 0x7f || (afterEscape && HEX_DIGIT.test(ch)));
    if (hexEscape) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (ch === '"' || ch === "\\") out += `\\${ch}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else out += ch;
    afterEscape = hexEscape;
  }
  return `${out}"`;
}

/**
 * One character inside a GBNF character class: letters past F and the space as they are, everything else escaped, so
 * no hex digit ever follows an escape (xgrammar reads `\x60bd` as one character, llama.cpp as `\x60` then "bd").
 */
function classChar(ch: string): string {
  const code = ch.codePointAt(0)!;
  if (/[G-Zg-z ]/.test(ch)) return ch;
  if (code < 0x80) return `\\x${code.toString(16).padStart(2, "0")}`;
  return code <= 0xffff ? `\\u${code.toString(16).padStart(4, "0")}` : `\\U${code.toString(16).padStart(8, "0")}`;
}

const charClass = (chars: Iterable<string>) => `[${[...chars].map(classChar).join("")}]`;

/** Unicode scalar values: what valid UTF-8 can encode (no NUL, no surrogates, nothing past U+10FFFF). */
const SCALAR_RANGES: readonly [number, number][] = [
  [0x01, 0xd7ff],
  [0xe000, 0x10ffff],
];

/**
 * Every valid character but `except`, as positive ranges: a negated class would also let through code points a
 * byte-level decoder accepts but UTF-8 forbids (surrogates, past U+10FFFF), which an engine cannot send back as text.
 */
function anyCharBut(except: Iterable<string>): string {
  const excluded = [...new Set([...except].map((c) => c.codePointAt(0)!))].sort((a, b) => a - b);
  const parts: string[] = [];
  for (const [low, high] of SCALAR_RANGES) {
    let from = low;
    for (const x of excluded.filter((x) => x >= low && x <= high)) {
      if (x > from) parts.push(range(from, x - 1));
      from = x + 1;
    }
    if (from <= high) parts.push(range(from, high));
  }
  return `[${parts.join("")}]`;
}

const range = (from: number, to: number) =>
  from === to
    ? classChar(String.fromCodePoint(from))
    : `${classChar(String.fromCodePoint(from))}-${classChar(String.fromCodePoint(to))}`;

/** The KMP automaton of `trigger`: next[state][char] for every char of the trigger (any other char returns to 0). */
function triggerAutomaton(trigger: readonly string[]): Map<string, number>[] {
  const alphabet = [...new Set(trigger)];
  const fail: number[] = [0];
  for (let i = 1, k = 0; i < trigger.length; i++) {
    while (k > 0 && trigger[i] !== trigger[k]) k = fail[k - 1]!;
    if (trigger[i] === trigger[k]) k++;
    fail[i] = k;
  }
  const next: Map<string, number>[] = [];
  for (let state = 0; state < trigger.length; state++) {
    const row = new Map<string, number>();
    for (const ch of alphabet) {
      let k = state;
      while (k > 0 && trigger[k] !== ch) k = fail[k - 1]!;
      row.set(ch, trigger[k] === ch ? k + 1 : 0);
    }
    next.push(row);
  }
  return next;
}

/**
 * Rules for free text that ends the turn anywhere, or enters `callRule` the moment `trigger` has been written
 * (the automaton's states are the trigger's prefixes written so far).
 */
function freeTextRules(trigger: string, callRule: string): string[] {
  const chars = [...trigger];
  const next = triggerAutomaton(chars);
  const target = (state: number) => (state === chars.length ? callRule : `text-${state}`);
  return next.map((row, state) => {
    const byTarget = new Map<number, string[]>();
    for (const [ch, to] of row) byTarget.set(to, [...(byTarget.get(to) ?? []), ch]);
    const alternatives = [`${anyCharBut(row.keys())} text-0`];
    for (const [to, group] of byTarget) alternatives.push(`${charClass(group)} ${target(to)}`);
    return `text-${state} ::= ( ${alternatives.join(" | ")} )?`;
  });
}

/** The rules of a GBNF text with every rule name prefixed (string literals and character classes untouched). */
export function prefixRules(gbnf: string, prefix: string): string[] {
  const lines = gbnf.split("\n").filter((l) => l.trim());
  const names = new Set(lines.map((l) => l.slice(0, l.indexOf("::=")).trim()));
  return lines.map((line) => {
    let out = "";
    for (let i = 0; i < line.length;) {
      const ch = line[i]!;
      if (ch === '"' || ch === "[") {
        const close = ch === '"' ? '"' : "]";
        let j = i + 1;
        while (j < line.length && line[j] !== close) j += line[j] === "\\" ? 2 : 1;
        out += line.slice(i, j + 1);
        i = j + 1;
      } else if (/[A-Za-z]/.test(ch)) {
        const word = /^[A-Za-z][A-Za-z0-9_-]*/.exec(line.slice(i))![0];
        out += names.has(word) ? prefix + word : word;
        i += word.length;
      } else {
        out += ch;
        i++;
      }
    }
    return out;
  });
}

export interface GrammarFunction {
  name: string;
  /** The parameters' grammar (ChatCodec.paramsGrammar), or undefined for a function without parameters. */
  params?: string;
}

/**
 * Where the turn starts: free text, or (steered) just after a forced call trigger, or after a forced trigger and name.
 */
export type TurnStart = { kind: "text" } | { kind: "call" } | { kind: "arguments"; name: string };

/** The grammar of one turn over `callable` functions in `syntax`. */
export function turnGrammar(
  syntax: CallSyntax,
  callable: readonly GrammarFunction[],
  start: TurnStart = { kind: "text" },
): string {
  if (!callable.length) return `root ::= ${anyCharBut([])}*`;
  const rules: string[] = [];
  callable.forEach((f, i) => {
    const named = (s: string) => s.replaceAll("{{functionName}}", f.name);
    const params = f.params ? `p${i}-root` : gbnfLiteral(syntax.emptyParams);
    rules.push(
      `args-${i} ::= ${gbnfLiteral(named(syntax.paramsPrefix))} ${params} ${gbnfLiteral(named(syntax.suffix))}`,
    );
    if (f.params) rules.push(...prefixRules(f.params, `p${i}-`));
  });
  const space = syntax.optionalPrefixSpace ? '" "? ' : "";
  rules.push(`call ::= ${space}( ${callable.map((f, i) => `${gbnfLiteral(f.name)} args-${i}`).join(" | ")} )`);
  let root: string;
  if (start.kind === "arguments") {
    const i = callable.findIndex((f) => f.name === start.name);
    if (i < 0) throw new Error(`steering names ${start.name}, which is not callable now`);
    root = `args-${i}`;
  } else if (start.kind === "call") root = "call";
  else {
    rules.push(...freeTextRules(syntax.trigger, "call"));
    root = "text-0";
  }
  return [`root ::= ${root}`, ...rules].join("\n");
}

/**
 * The schema with every free string bounded to `maxLength` characters: a steered turn's call must end within its
 * token limit (the local engine forces the closing quote near the limit instead; one request cannot).
 */
export function boundStrings(schema: JsonSchemaObject, maxLength: number): JsonSchemaObject {
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(visit);
    if (!node || typeof node !== "object") return node;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(node)) out[k] = k === "enum" || k === "const" ? v : visit(v);
    if (out.type === "string" && out.enum === undefined && out.const === undefined) {
      out.maxLength = Math.min(typeof out.maxLength === "number" ? out.maxLength : Infinity, maxLength);
      if (typeof out.minLength === "number" && out.minLength > (out.maxLength as number)) out.minLength = out.maxLength;
    }
    return out;
  };
  return visit(schema) as JsonSchemaObject;
}

/** How many free strings a schema has (the steering bound shares the turn's tokens between them). */
export function countStrings(schema: JsonSchemaObject | undefined): number {
  let n = 0;
  const visit = (node: unknown) => {
    if (Array.isArray(node)) return node.forEach(visit);
    if (!node || typeof node !== "object") return;
    const o = node as Record<string, unknown>;
    if (o.type === "string" && o.enum === undefined && o.const === undefined) n++;
    for (const [k, v] of Object.entries(o)) if (k !== "enum" && k !== "const") visit(v);
  };
  visit(schema);
  return n;
}
