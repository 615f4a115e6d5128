import { z } from "zod";
import { nearestKey } from "./nearestKey.js";

/*
 * zod helpers for JSON Schemas that every client can read, including those that map tool schemas onto a
 * single-type dialect (Gemini-style function declarations, OpenAPI 3.0 subsets): one `type` per node, and every
 * object says whether it takes keys it does not list. test/e2e/schema-portability.test.ts checks every tool.
 */

/**
 * `T | null` written as `anyOf: [T, {type: "null"}]`. zod folds a bare `T.nullable()` into a type array
 * (`type: ["string", "null"]`); a null branch that says what null means is not a bare type, so it stays a union.
 */
export const orNull = <T extends z.ZodType>(inner: T, meaning: string) => z.union([inner, z.null().describe(meaning)]);

/**
 * An object of any JSON values (a call's arguments, a time breakdown): `additionalProperties: true`, not a typeless
 * `{}`.
 */
export const anyObject = () => z.record(z.string(), z.unknown()).meta({ additionalProperties: true });

/**
 * A tool's arguments: the keys it documents and no others. An unknown key is refused, named with the nearest valid
 * one (a typo such as `max_token` would otherwise be dropped silently and the call run without it); the SDK reports
 * the refusal as the tool's input validation error, naming the tool.
 */
export const toolInput = <S extends z.ZodRawShape>(shape: S) =>
  z
    .strictObject(shape, {
      error: (issue) =>
        issue.code === "unrecognized_keys" ? unknownArguments(issue.keys, Object.keys(shape)) : undefined,
    })
    .meta({ additionalProperties: false });

/** Keys reported by name; a longer key is no typo of a valid one (those are short) and is shown cut. */
const KEY_CHARS = 64;
const KEYS_NAMED = 5;

/** The refusal of unknown keys: each named with the nearest valid one, or the valid ones listed. */
function unknownArguments(keys: readonly string[], valid: readonly string[]): string {
  const named = keys.slice(0, KEYS_NAMED).map((key) => {
    const near = key.length <= KEY_CHARS ? nearestKey(key, valid) : undefined;
    const shown = key.length <= KEY_CHARS ? key : `${key.slice(0, KEY_CHARS)}...`;
    if (near) return `unknown argument ${JSON.stringify(shown)}: did you mean "${near}"?`;
    return `unknown argument ${JSON.stringify(shown)}: ${valid.length ? `the arguments are ${valid.join(", ")}` : "this tool takes no arguments"}`;
  });
  const more = keys.length - named.length;
  return named.join("; ") + (more > 0 ? ` (and ${more} more unknown)` : "");
}
