import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectClient, testConfig, type Connected } from "../helpers/server.js";

type Node = Record<string, unknown>;

/**
 * What a client that maps tool schemas onto a single-type dialect (Gemini-style function declarations,
 * OpenAPI 3.0 subsets) needs: every node names one type (a nullable field is `anyOf` with a `{type:"null"}`
 * branch, not a type array), every object says whether it takes properties it does not list, every array
 * says what it holds. Returns one line per violation, with the node's path.
 */
export function portabilityProblems(schema: unknown, path: string): string[] {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) return [`${path}: not a schema object`];
  const node = schema as Node;
  const problems: string[] = [];
  if ("$ref" in node) problems.push(`${path}: $ref (not inlined)`);
  const branches = (node.anyOf ?? node.oneOf) as unknown[] | undefined;
  if (branches) {
    if ("type" in node) problems.push(`${path}: type beside anyOf/oneOf`);
    branches.forEach((b, i) =>
      problems.push(...portabilityProblems(b, `${path}.${node.anyOf ? "anyOf" : "oneOf"}[${i}]`)),
    );
    return problems;
  }
  if (Array.isArray(node.type)) problems.push(`${path}: type array ${JSON.stringify(node.type)}`);
  else if (typeof node.type !== "string") problems.push(`${path}: no type`);
  if ("allOf" in node) problems.push(`${path}: allOf`);
  if (node.type === "object") {
    if (!("additionalProperties" in node)) problems.push(`${path}: object without additionalProperties`);
    for (const [key, value] of Object.entries((node.properties as Record<string, unknown> | undefined) ?? {}))
      problems.push(...portabilityProblems(value, `${path}.${key}`));
    const extra = node.additionalProperties;
    if (typeof extra === "object" && extra !== null)
      problems.push(...portabilityProblems(extra, `${path}.additionalProperties`));
  }
  if (node.type === "array") {
    if (node.items === undefined) problems.push(`${path}: array without items`);
    else problems.push(...portabilityProblems(node.items, `${path}.items`));
  }
  return problems;
}

describe("tools/list schemas are portable", () => {
  let client: Connected;
  let tools: Tool[];

  beforeAll(async () => {
    client = await connectClient("stdio", undefined, {}, testConfig());
    tools = (await client.client.listTools()).tools;
  });
  afterAll(async () => {
    await client?.close();
  });

  it("the check itself finds the problems it names", () => {
    expect(portabilityProblems({ type: ["string", "null"] }, "x")).toEqual(['x: type array ["string","null"]']);
    expect(portabilityProblems({ description: "anything" }, "x")).toEqual(["x: no type"]);
    expect(portabilityProblems({ type: "object", properties: { a: { type: "string" } } }, "x")).toEqual([
      "x: object without additionalProperties",
    ]);
    expect(portabilityProblems({ type: "array" }, "x")).toEqual(["x: array without items"]);
    expect(portabilityProblems({ anyOf: [{ type: "string" }, { type: "null" }] }, "x")).toEqual([]);
    expect(
      portabilityProblems(
        { type: "object", properties: { a: { anyOf: [{ type: "integer" }, {}] } }, additionalProperties: false },
        "x",
      ),
    ).toEqual(["x.a.anyOf[1]: no type"]);
  });

  it("every input and output schema node has one type; every object states additionalProperties", () => {
    expect(tools.length).toBeGreaterThanOrEqual(14);
    const problems = tools.flatMap((t) => [
      ...portabilityProblems(t.inputSchema, `${t.name}.input`),
      ...(t.outputSchema ? portabilityProblems(t.outputSchema, `${t.name}.output`) : []),
    ]);
    expect(problems).toEqual([]);
  });

  it("every tool carries its annotations: a title and each of the four hints", () => {
    for (const t of tools) {
      const a = t.annotations ?? {};
      expect({ tool: t.name, title: typeof a.title }).toEqual({ tool: t.name, title: "string" });
      for (const hint of ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] as const)
        expect({ tool: t.name, hint, value: typeof a[hint] }).toEqual({ tool: t.name, hint, value: "boolean" });
    }
    const hints = (name: string) => {
      const { readOnlyHint, destructiveHint, idempotentHint, openWorldHint } = tools.find(
        (t) => t.name === name,
      )!.annotations!;
      return { readOnlyHint, destructiveHint, idempotentHint, openWorldHint };
    };
    // what each one does to the server and beyond it
    expect(hints("list_adapters")).toEqual({
      readOnlyHint: true,
      destructiveHint: false,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(hints("get_session")).toEqual({
      readOnlyHint: true,
      destructiveHint: false,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(hints("close_session")).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(hints("unregister_adapter")).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(hints("register_adapter")).toMatchObject({ readOnlyHint: false, destructiveHint: false });
    expect(hints("generate")).toMatchObject({ readOnlyHint: false, idempotentHint: false, openWorldHint: false });
    expect(hints("create_session")).toMatchObject({ readOnlyHint: false, idempotentHint: false });
    // read fetches URLs; this server's search is its own local index (a web backend makes it open-world)
    expect(hints("read")).toMatchObject({ readOnlyHint: false, openWorldHint: true });
    expect(hints("search")).toMatchObject({ readOnlyHint: false, openWorldHint: false });
    expect(hints("run_task").openWorldHint).toBe(true);
  });

  it("search is open-world when its backend is a web search API", async () => {
    // nothing is searched here: the port only has to be named
    const web = await connectClient(
      "stdio",
      undefined,
      {},
      testConfig({ tools: { search: { backend: "searxng", searxng: { url: "http://127.0.0.1:9" } } } }),
    );
    try {
      const search = (await web.client.listTools()).tools.find((t) => t.name === "search")!;
      expect(search.annotations?.openWorldHint).toBe(true);
    } finally {
      await web.close();
    }
  });
});
