import type { McpHost } from "../host.js";
import { z } from "zod";
import { anyObject, orNull, toolInput } from "../../portableSchema.js";
import type { ServerContext } from "../context.js";
import { sessionId, switchShape } from "../schemas.js";
import { ownerKey } from "../owners.js";
import { SeedSchema } from "../../harness/types.js";
import { switchView } from "../results/switchView.js";
import { progressFor } from "../progress.js";
import { fail, ok, toolCall } from "../results/toolResult.js";

const PROGRESS_EVERY_TOKENS = 16;

export function registerGenerateTool(server: McpHost, ctx: ServerContext) {
  const maxTokens = ctx.runtime.config.model.contextSize;
  server.registerTool(
    "generate",
    {
      title: "Generate the next turn",
      // appends the model's turn to the history: each call adds another
      annotations: {
        title: "Generate the next turn",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: false,
        openWorldHint: false,
      },
      description:
        "Let the local model write its next assistant turn under the session's active adapter. Returns its text and parsed tool calls; answer each call (load_lora/offload_lora/an external tool, with its call_id) before the next generate.",
      inputSchema: toolInput({
        session_id: sessionId,
        owner_key: ownerKey,
        max_tokens: z
          .number()
          .int()
          .min(1)
          .max(maxTokens)
          .optional()
          .describe(
            "At most this many tokens (forced steering tokens included); clamped to the room left in the context window (then finish_reason is length).",
          ),
        temperature: z.number().min(0).max(2).optional().describe("0 (default) = greedy."),
        seed: SeedSchema.optional(),
        top_logprobs: z
          .number()
          .int()
          .min(1)
          .max(20)
          .optional()
          .describe("Return the k most likely tokens and their log-probs at each generated position."),
        token_bias: z
          .record(z.string().min(1).max(64), z.number().min(-100).max(100))
          .optional()
          .describe("Logit bias by token text (special tokens allowed)."),
        tool_call: z
          .object({ name: z.string().min(1).max(64).optional() })
          .strict()
          .optional()
          .describe(
            "Steer the turn into a tool call: the chat template's call prefix (and name, if given) is forced, the model's logits choose the rest. A testing and demo aid for models that do not call tools on their own.",
          ),
      }),
      outputSchema: {
        text: z.string(),
        tool_calls: z.array(z.object({ id: z.string(), name: z.string(), arguments: anyObject() })),
        finish_reason: z.enum(["stop", "tool_calls", "length", "cancelled"]),
        adapter: orNull(z.string(), "the base model"),
        tokens: z.object({ prompt: z.number(), cached: z.number(), evaluated: z.number(), generated: z.number() }),
        context_remaining: z
          .number()
          .describe(
            "Tokens of the session's context window (model.contextSize) still free after this turn; a turn is clamped to them.",
          ),
        timings: z.record(z.string(), z.number()),
        released: z
          .object({ adapter: z.string(), reason: z.string(), switch: z.object(switchShape) })
          .optional()
          .describe(
            "The active stage's budget was spent: the server released the adapter before this turn (with that switch's figures).",
          ),
        logprobs: z
          .array(
            z.object({
              token: z.number(),
              text: z.string(),
              logprob: z.number(),
              top: z.array(z.object({ token: z.number(), text: z.string(), logprob: z.number() })),
            }),
          )
          .optional(),
      },
    },
    (args, extra) =>
      toolCall(async () => {
        const progress = progressFor(extra, "waiting for the model (queued or prefilling the prompt)");
        let lastReported = 0;
        const outcome = await progress.run(() =>
          ctx.sessions.generate(ctx.owners.of(extra, args.owner_key), args.session_id, {
            maxTokens: args.max_tokens,
            temperature: args.temperature,
            seed: args.seed,
            topLogprobs: args.top_logprobs,
            tokenBias: args.token_bias,
            steerToolCall: args.tool_call,
            signal: extra.signal,
            onProgress: (generated) => {
              if (generated - lastReported < PROGRESS_EVERY_TOKENS) return;
              lastReported = generated;
              progress.report(`decoding: ${generated} tokens generated`);
            },
          }),
        );
        if (!outcome.recorded) return fail("generation cancelled; the session's history is unchanged");
        const r = outcome.result;
        return ok({
          text: r.text,
          tool_calls: outcome.calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
          finish_reason: r.finishReason,
          adapter: r.adapter,
          tokens: r.tokens,
          context_remaining: r.contextRemaining,
          timings: r.timings,
          ...(r.logprobs ? { logprobs: r.logprobs } : {}),
          ...(outcome.released
            ? {
                released: {
                  adapter: outcome.released.adapter,
                  reason: outcome.released.reason,
                  switch: switchView(outcome.released.switch),
                },
              }
            : {}),
        });
      }),
  );
}
