import { z } from "zod";

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
 * A tool's arguments: the keys it documents and no others. Parsing is unchanged (unknown keys are dropped, as the
 * SDK's default object does); the schema tells clients not to send them.
 */
export const toolInput = <S extends z.ZodRawShape>(shape: S) => z.object(shape).meta({ additionalProperties: false });
