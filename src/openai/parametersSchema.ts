import { z } from "zod";

/**
 * Counts a schema may ask for (minItems, maxLength, ...): the call grammar repeats a rule that many times, and
 * llama.cpp's grammar parser refuses repetition counts from about 1,000 on.
 */
const MAX_COUNT = 512;
/** Nesting of a parameters schema, in JSON levels: far beyond any function's arguments, and no stack runs out. */
const MAX_DEPTH = 64;

const TYPE_NAMES = ["string", "number", "integer", "boolean", "null", "object", "array"] as const;
const Literal = z.union([z.string(), z.number(), z.boolean(), z.null()], {
  error: "a string, number, boolean or null",
});
const Count = z
  .number()
  .int()
  .min(0)
  .max(MAX_COUNT, `at most ${MAX_COUNT} (the call grammar repeats a rule that often)`)
  .optional();

/**
 * One JSON Schema node as the engines read it (node-llama-cpp renders it into the prompt and builds the call grammar
 * from it): each keyword they read must have its JSON Schema shape, or rendering throws. Keywords they do not read
 * (title, default, pattern, ...) pass unread.
 */
const SchemaNode = z.looseObject({
  type: z
    .union([z.enum(TYPE_NAMES), z.array(z.enum(TYPE_NAMES)).min(1)], {
      error: `one of ${TYPE_NAMES.join(", ")}, or a list of them`,
    })
    .optional(),
  description: z.string().optional(),
  get properties() {
    return z.record(z.string(), SchemaNode).optional();
  },
  required: z.array(z.string()).optional(),
  get additionalProperties() {
    return z.union([z.boolean(), SchemaNode]).optional();
  },
  get items() {
    return SchemaNode.optional();
  },
  get prefixItems() {
    return z.array(SchemaNode).optional();
  },
  enum: z.array(Literal, { error: "a list of strings, numbers, booleans or nulls" }).min(1).optional(),
  const: Literal.optional(),
  get oneOf() {
    return z.array(SchemaNode).min(1).optional();
  },
  get anyOf() {
    return z.array(SchemaNode).min(1).optional();
  },
  get allOf() {
    return z.array(SchemaNode).min(1).optional();
  },
  get $defs() {
    return z.record(z.string(), SchemaNode).optional();
  },
  $ref: z.string().optional(),
  format: z.string().optional(),
  minItems: Count,
  maxItems: Count,
  minLength: Count,
  maxLength: Count,
  minProperties: Count,
  maxProperties: Count,
});

/** JSON levels of `value` (counted level by level, so a deep one cannot exhaust the stack). */
function depthOf(value: unknown): number {
  let depth = 0;
  for (let level = [value]; level.length; depth++)
    level = level.flatMap((v) => (v !== null && typeof v === "object" ? Object.values(v) : []));
  return depth;
}

/** A client function's `parameters`: a JSON Schema object of the shape the engines can read. */
export const ParametersSchema = z
  .record(z.string(), z.unknown())
  .refine((schema) => depthOf(schema) <= MAX_DEPTH, {
    message: `nested deeper than ${MAX_DEPTH} levels`,
    abort: true,
  })
  .pipe(SchemaNode);
