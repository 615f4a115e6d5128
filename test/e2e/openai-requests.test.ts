import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHttpServer, testConfig, type HttpServer } from "../helpers/server.js";
import { apiError } from "../helpers/openaiErrors.js";

/**
 * Requests the /v1 door must refuse before any run (400 naming the param and the fix), and the official fields it must
 * keep accepting, through the official openai client against a real server on 127.0.0.1.
 */
const config = testConfig({ harness: { maxTokensPerTurn: 256, workflow: ["write"], stage: { turns: 1 } } });

let server: HttpServer;
let client: OpenAI;
beforeAll(async () => {
  server = await startHttpServer([], config);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => server?.stop());

const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
const weatherTool = (parameters: Record<string, unknown>) => [
  { type: "function" as const, function: { name: "get_weather", parameters } },
];
const CITY = { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome"] } }, required: ["city"] };

describe("the /v1 door refuses what it cannot serve with 400, naming the param and the fix", () => {
  it("a forced client call that max_tokens cannot hold: 400 on max_tokens with the minimum, and that minimum is enough", async () => {
    for (const tool_choice of [{ type: "function" as const, function: { name: "get_weather" } }, "required" as const]) {
      const refused = await apiError(
        client.chat.completions.create({
          model: "base",
          messages,
          tools: weatherTool(CITY),
          tool_choice,
          max_tokens: 4,
        }),
      );
      expect([refused.status, refused.type, refused.param, refused.code]).toEqual([
        400,
        "invalid_request_error",
        "max_tokens",
        "max_tokens_too_small",
      ]);
      const minimum = Number(/raise max_tokens to (\d+) or more/.exec(refused.message)?.[1]);
      expect(minimum).toBeGreaterThan(4);
      const answered = await client.chat.completions.create({
        model: "base",
        messages,
        tools: weatherTool(CITY),
        tool_choice,
        max_tokens: minimum,
        seed: 1,
      });
      const call = answered.choices[0]!.message.tool_calls?.[0];
      expect(answered.choices[0]!.finish_reason).toBe("tool_calls");
      expect(call?.type === "function" && JSON.parse(call.function.arguments)).toHaveProperty("city");
    }
  });

  it("a forced call longer than the server's turns (harness.maxTokensPerTurn, 256 here): 400 naming that setting, not max_tokens", async () => {
    // at least 300 characters of argument: more tokens than any turn of this server holds
    const long = weatherTool({ type: "object", properties: { text: { type: "string", minLength: 300 } } });
    const tool_choice = { type: "function" as const, function: { name: "get_weather" } };
    const short = await apiError(
      client.chat.completions.create({ model: "base", messages, tools: long, tool_choice, max_completion_tokens: 100 }),
    );
    expect([short.status, short.param, short.code]).toEqual([400, "max_completion_tokens", "max_tokens_too_small"]);
    const minimum = Number(/raise max_completion_tokens to (\d+) or more/.exec(short.message)?.[1]);
    expect(minimum).toBeGreaterThan(256);
    const capped = await apiError(
      client.chat.completions.create({ model: "base", messages, tools: long, tool_choice, max_tokens: minimum }),
    );
    expect([capped.status, capped.type, capped.param, capped.code]).toEqual([
      400,
      "invalid_request_error",
      "tool_choice",
      "call_does_not_fit",
    ]);
    expect(capped.message).toMatch(/harness\.maxTokensPerTurn \(256\)/);
  });

  it("a tool schema with a dangling, external or recursive $ref (or one the grammar cannot follow): 400 naming the tool and the $ref", async () => {
    const node = { type: "object", properties: { name: { type: "string" } } };
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [
        { type: "object", properties: { place: { $ref: "#/$defs/missing" } } },
        ".properties.place.$ref",
        /"#\/\$defs\/missing" points to no definition/,
      ],
      [
        { type: "object", properties: { place: { $ref: "https://example.com/place.json" } } },
        ".properties.place.$ref",
        /external/,
      ],
      [{ type: "object", properties: { place: { $ref: "place.json#/x" } } }, ".properties.place.$ref", /external/],
      [
        { type: "object", properties: { self: { $ref: "#" } } },
        ".properties.self.$ref",
        /"#" refers to the schema it is in/,
      ],
      [
        {
          type: "object",
          properties: { tree: { $ref: "#/$defs/node" } },
          $defs: {
            node: {
              ...node,
              properties: { ...node.properties, children: { type: "array", items: { $ref: "#/$defs/node" } } },
            },
          },
        },
        ".$defs.node.properties.children.items.$ref",
        /recursive: #\/\$defs\/node -> #\/\$defs\/node/,
      ],
      [
        {
          type: "object",
          properties: { a: { $ref: "#/$defs/a" } },
          $defs: {
            a: { type: "object", properties: { b: { $ref: "#/$defs/b" } } },
            b: { anyOf: [{ type: "null" }, { $ref: "#/$defs/a" }] },
          },
        },
        ".$defs.b.anyOf[1].$ref",
        /recursive: #\/\$defs\/a -> #\/\$defs\/b -> #\/\$defs\/a/,
      ],
      [
        {
          type: "object",
          properties: { place: { type: "object", properties: { at: { $ref: "#/$defs/p" } }, $defs: { p: node } } },
        },
        ".properties.place.$defs",
        /\$defs belongs at the top/,
      ],
      [
        // a chain of 40,000 definitions (about 2 MB) ending in a dangling one: walked without running out of stack
        {
          type: "object",
          properties: { first: { $ref: "#/$defs/d0" } },
          $defs: Object.fromEntries(
            Array.from({ length: 40_000 }, (_, i) => [
              `d${i}`,
              { type: "array", items: { $ref: `#/$defs/d${i + 1}` } },
            ]),
          ),
        },
        ".$defs.d39999.items.$ref",
        /"#\/\$defs\/d40000" points to no definition/,
      ],
      [
        { type: "object", properties: { place: { $ref: "#/definitions/place" } }, definitions: { place: node } },
        ".properties.place.$ref",
        /only #\/\$defs\/NAME/,
      ],
    ];
    for (const [parameters, where, message] of cases) {
      const started = performance.now();
      const refused = await apiError(
        client.chat.completions.create({
          model: "base",
          messages,
          max_tokens: 64,
          tools: [...weatherTool(CITY), { type: "function", function: { name: "lookup", parameters } }],
        }),
      );
      const param = `tools[1].function.parameters${where}`;
      expect([refused.status, refused.type, refused.param, refused.code]).toEqual([
        400,
        "invalid_request_error",
        param,
        "invalid_value",
      ]);
      expect(refused.message).toContain(param);
      expect(refused.message).toContain("lookup");
      expect(refused.message).toMatch(message);
      expect(performance.now() - started).toBeLessThan(2_000); // refused before any generation
    }
    // a local $ref that resolves and does not recurse is still served, and its call follows the definition
    const answered = await client.chat.completions.create({
      model: "base",
      messages,
      max_tokens: 128,
      seed: 1,
      tools: weatherTool({
        type: "object",
        properties: { city: { $ref: "#/$defs/city" } },
        required: ["city"],
        $defs: { city: CITY.properties.city },
      }),
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    const call = answered.choices[0]!.message.tool_calls?.[0];
    expect(answered.choices[0]!.finish_reason).toBe("tool_calls");
    expect(call?.type === "function" && JSON.parse(call.function.arguments)).toMatchObject({
      city: expect.stringMatching(/^(Paris|Rome)$/),
    });
  });

  it("an unrecognized request argument: 400 naming it and the nearest valid one; every official field still accepted", async () => {
    const body = { model: "base", messages, max_tokens: 4 };
    const post = (extra: Record<string, unknown>) =>
      fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ...body, ...extra }),
      });
    const typo = await post({ max_token: 8 });
    expect(typo.status).toBe(400);
    expect(await typo.json()).toEqual({
      error: {
        message: "Unrecognized request argument supplied: max_token (did you mean max_tokens?)",
        type: "invalid_request_error",
        param: "max_token",
        code: "unknown_parameter",
      },
    });
    const extra = await post({ extra: 1 });
    expect(await extra.json()).toMatchObject({
      error: { message: "Unrecognized request argument supplied: extra", param: "extra", code: "unknown_parameter" },
    });
    // fields the official client may send that do not change this server's answer: accepted (and ignored)
    const ignored = await client.chat.completions.create({
      ...body,
      prompt_cache_key: "k",
      prompt_cache_retention: "in_memory",
      prompt_cache_options: { mode: "implicit", ttl: "30m" },
      safety_identifier: "user-1",
      user: "u",
      store: false,
      metadata: { a: "b" },
      parallel_tool_calls: true,
      stream_options: null,
      verbosity: "medium",
      moderation: null,
      service_tier: "auto",
      top_p: 1,
      n: 1,
    });
    expect(ignored.choices).toHaveLength(1);
    // those that would change it are refused by name as unsupported, not as unrecognized
    const verbose = await apiError(client.chat.completions.create({ ...body, verbosity: "low" }));
    expect([verbose.status, verbose.param, verbose.code]).toEqual([400, "verbosity", "unsupported_parameter"]);
  });
});
