/*
 * How long a steered call's arguments can still grow once its closing starts (bias.ts: from then on, the token closing
 * the innermost open JSON value is forced wherever node-llama-cpp's function-calling grammar lets it through). Where
 * the grammar masks it (a required field still missing, an enum value half written, a number that must take a
 * digit), the model writes what the grammar allows, and only that much. The walk mirrors how node-llama-cpp 3 turns
 * a JSON schema into a grammar (getGbnfJsonTerminalForGbnfJsonSchema) and counts bytes: every token is at least one.
 */

/** node-llama-cpp indents each nesting level of a function's arguments by this many spaces (scopePadSpaces). */
const PAD_SPACES = 4;
/**
 * A string under way: an escape sequence begun (`\u` and four hex digits) and the closing quote. Every character
 * the grammar requires (minLength) may itself be an escape: six bytes.
 */
const OPEN_STRING = 7;
const ESCAPED_CHAR = 6;
/** The longest number the grammar allows: sign, 16 digits, fraction of 16, exponent with sign and 16 digits. */
const NUMBER = 52;
/** `"YYYY-MM-DDTHH:MM:SS.mmm+HH:MM"`, the longest formatted string (date, time, date-time). */
const FORMATTED_STRING = 31;
/**
 * Free-form JSON (additionalProperties, a $ref that may recurse) has no bound: the model may open values while the
 * closers are masked. An allowance for it, so such a call is likely, not certain, to close in time.
 */
const FREE_FORM = 64;
/**
 * More tokens than any context window holds: a bound saturates here, so a schema whose required items multiply past
 * it (nested minItems) is simply one that cannot fit, and every sum stays an exact integer.
 */
export const BEYOND_ANY_CONTEXT = 2 ** 32;

type Schema = Readonly<Record<string, unknown>>;

/** The widest whitespace the grammar allows before a value at `depth`: a newline and its indentation. */
const whitespace = (depth: number) => 1 + PAD_SPACES * depth;
const literal = (value: unknown) => Buffer.byteLength(JSON.stringify(value));
const schemaOf = (value: unknown): Schema => (value && typeof value === "object" ? (value as Schema) : {});
/** A count keyword (minItems, minLength) as a number in [0, BEYOND_ANY_CONTEXT]: anything else counts as none. */
const countOf = (value: unknown) => Math.min(BEYOND_ANY_CONTEXT, Math.max(0, Number(value ?? 0) || 0));

/**
 * The most bytes a function's arguments need, from any point of writing them, once their closing has started
 * (undefined parameters: the call takes none).
 */
export function argumentsBound(schema: Schema | undefined): number {
  return schema ? valueBound(schema, 0) : 0;
}

function valueBound(schema: Schema, depth: number): number {
  return Math.min(BEYOND_ANY_CONTEXT, unsaturatedBound(schema, depth));
}

function unsaturatedBound(schema: Schema, depth: number): number {
  if (typeof schema.$ref === "string") return FREE_FORM;
  if (Array.isArray(schema.oneOf)) return Math.max(0, ...schema.oneOf.map((s) => valueBound(schemaOf(s), depth)));
  if (schema.const !== undefined) return literal(schema.const);
  if (Array.isArray(schema.enum)) return Math.max(0, ...schema.enum.map(literal));
  if (schema.type === "object") return objectBound(schema, depth);
  if (schema.type === "array") return arrayBound(schema, depth);
  if (schema.type === "string")
    return schema.format == null ? OPEN_STRING + ESCAPED_CHAR * countOf(schema.minLength) : FORMATTED_STRING;
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  const bounds = [
    types.includes("string") ? OPEN_STRING : 0,
    types.includes("number") || types.includes("integer") ? NUMBER : 0,
    types.includes("boolean") ? "false".length : 0,
  ];
  // a schema of no known type is `null`, as in node-llama-cpp
  return Math.max("null".length, ...bounds);
}

/** `{`, every field (all required, in order) with its separators, `}`; the model may add properties where allowed. */
function objectBound(schema: Schema, depth: number): number {
  const fields = Object.entries(schemaOf(schema.properties)).map(
    ([key, value]) => literal(key) + ":".length + " ".length + valueBound(schemaOf(value), depth + 1),
  );
  const separators = Math.max(0, fields.length - 1) * (",".length + whitespace(depth + 1));
  const free = schema.additionalProperties == null || schema.additionalProperties === false ? 0 : FREE_FORM;
  return 2 + whitespace(depth + 1) + fields.reduce((a, b) => a + b, 0) + separators + free + whitespace(depth);
}

/** `[`, the items the grammar requires (at least the one under way), `]`. */
function arrayBound(schema: Schema, depth: number): number {
  const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems.map(schemaOf) : [];
  const count = Math.max(1, prefix.length, countOf(schema.minItems));
  const prefixItems = prefix.reduce((sum, item) => sum + valueBound(item, depth + 1), 0);
  // every item past the prefix has the same bound: walked once, not once an item (nested arrays would cost
  // minItems to the power of their depth, on the event loop)
  const rest = count - prefix.length;
  const restItems = rest && rest * (schema.items ? valueBound(schemaOf(schema.items), depth + 1) : FREE_FORM);
  const separators = (count - 1) * (",".length + whitespace(depth + 1));
  return 2 + whitespace(depth + 1) + prefixItems + restItems + separators + whitespace(depth);
}
