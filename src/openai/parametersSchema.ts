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

/** The one form of `$ref` the call grammar (node-llama-cpp's) follows. */
const DEFS_PREFIX = "#/$defs/";
/** SchemaNode's keywords whose values are schemas: one schema, or a list of them (`properties` is a map). */
const ONE_SCHEMA = ["additionalProperties", "items"] as const;
const SCHEMA_LIST = ["prefixItems", "oneOf", "anyOf", "allOf"] as const;

type Path = (string | number)[];
/** A `$ref` the engines cannot follow: where (the path of the offending key) and why. */
export interface RefProblem {
  path: Path;
  message: string;
}
/** One step of the walk: a schema node, a definition to walk unless it was, or the mark that one was walked whole. */
type Step = { node: unknown; path: Path } | { def: string } | { done: string };

/**
 * The first `$ref` of a parameters schema the call grammar cannot follow: external (not starting with `#`), a form
 * other than `#/$defs/NAME` (it reads no other and would let any JSON through), dangling, or recursive (a definition
 * reached again through its own references: its call need never end). A `$defs` below the top is refused too:
 * `#/$defs/NAME` points at the top one, while the grammar looks in the nearest. Walked depth first with a stack of its
 * own, each definition once, in time linear in the schema's size: no deep schema or long chain of definitions exhausts
 * the call stack or holds the event loop.
 */
export function refProblem(schema: Record<string, unknown>): RefProblem | undefined {
  const defs = isObject(schema.$defs) ? schema.$defs : {};
  const walked = new Set<string>();
  // the definitions being walked, outermost first: depth first, they are the ones the current node was reached through
  const open: string[] = [];
  const isOpen = new Set<string>();
  // the schema first, then the definitions it did not reach (each is checked, referenced or not)
  const steps: Step[] = Object.keys(defs)
    .reverse()
    .map((def) => ({ def }));
  steps.push({ node: schema, path: [] });
  for (let step = steps.pop(); step; step = steps.pop()) {
    if ("done" in step) {
      isOpen.delete(open.pop()!);
      walked.add(step.done);
    } else if ("def" in step) {
      if (walked.has(step.def)) continue;
      open.push(step.def);
      isOpen.add(step.def);
      steps.push({ done: step.def }, { node: defs[step.def], path: ["$defs", step.def] });
    } else if (isObject(step.node)) {
      const { node, path } = step;
      if (node !== schema && node.$defs !== undefined)
        return {
          path: [...path, "$defs"],
          message: "$defs belongs at the top of parameters, where #/$defs/NAME points",
        };
      if (typeof node.$ref === "string") {
        const problem = refTarget(node.$ref, defs);
        if (typeof problem === "string") return { path: [...path, "$ref"], message: problem };
        if (isOpen.has(problem.def))
          return {
            path: [...path, "$ref"],
            message: `recursive: ${[...open.slice(open.indexOf(problem.def)), problem.def].map((n) => DEFS_PREFIX + n).join(" -> ")} (a call of it need never end)`,
          };
        steps.push({ def: problem.def });
      }
      // pushed last first, so they are looked at in the order written (a loop: a spread of a huge list would overflow)
      const children: Step[] = [];
      if (isObject(node.properties))
        for (const [key, value] of Object.entries(node.properties))
          children.push({ node: value, path: [...path, "properties", key] });
      for (const key of ONE_SCHEMA) children.push({ node: node[key], path: [...path, key] });
      for (const key of SCHEMA_LIST) {
        const list = node[key];
        if (Array.isArray(list)) list.forEach((value, i) => children.push({ node: value, path: [...path, key, i] }));
      }
      for (let i = children.length - 1; i >= 0; i--) steps.push(children[i]!);
    }
  }
  return undefined;
}

/** The definition a `$ref` names, or why the grammar cannot follow it. */
function refTarget(ref: string, defs: Record<string, unknown>): { def: string } | string {
  if (!ref.startsWith("#")) return `"${ref}" is external: only #/$defs/NAME, inside the schema, is followed`;
  if (ref === "#") return `"#" refers to the schema it is in: recursive`;
  const def = ref.slice(DEFS_PREFIX.length);
  if (!ref.startsWith(DEFS_PREFIX) || def.includes("/"))
    return `"${ref}": only #/$defs/NAME is followed; move the definition into the top-level $defs`;
  if (!Object.hasOwn(defs, def)) return `"${ref}" points to no definition in $defs`;
  return { def };
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);
