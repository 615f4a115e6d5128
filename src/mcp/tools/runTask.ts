import type { McpHost } from "../host.js";
import { z } from "zod";
import { anyObject, toolInput } from "../../portableSchema.js";
import { LONG_TEXT_MAX } from "../../config/configSchema.js";
import { SoftLimitsSchema, StageBudgetSchema } from "../../budgets/budgets.js";
import { DEGENERATE_RULES } from "../../harness/degenerate.js";
import { HarnessError } from "../../harness/errors.js";
import { runTask } from "../../harness/runTaskUnderPolicy.js";
import { FINISHES, PolicySchema, SeedSchema, SteeringSchema } from "../../harness/types.js";
import type { ServerContext } from "../context.js";
import { ownerKey } from "../owners.js";
import { progressFor } from "../progress.js";
import { fail, ok, toolCall } from "../results/toolResult.js";

export function registerRunTaskTool(server: McpHost, ctx: ServerContext) {
  server.registerTool(
    "run_task",
    {
      title: "Run a task end to end",
      // opens a session and writes a trace; its model calls the server's tools, the web when one of them reaches it
      annotations: {
        title: "Run a task end to end",
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: false,
        openWorldHint: [...ctx.toolbox.tools.values()].some((t) => t.openWorld),
      },
      description:
        "Solve a task with the local model under a policy: hard (the prescribed workflow, default plan -> search -> write), soft (the base model picks its adapters), or a comparison mode (base, single:<alias>, static: every adapter at once, static:linear|ties|dare-ties: the library's merge by that method). Reports progress per stage and turn; returns the answer and a trace summary (time by category, switches); the full trace is the resource weact://traces/{trace_id}.",
      inputSchema: toolInput({
        task: z.string().min(1).max(LONG_TEXT_MAX),
        policy: PolicySchema.default("hard"),
        workflow: z
          .array(z.string().min(1).max(64))
          .min(1)
          .max(16)
          .optional()
          .describe(
            "hard: the stages, in order; soft: its last stage is the writer the answer must come from (default from config).",
          ),
        budgets: StageBudgetSchema.partial().optional().describe("Per-stage limits; override the manifest and config."),
        soft: SoftLimitsSchema.partial().optional().describe("soft: run-level limits and guards."),
        seed: SeedSchema.optional(),
        steering: z
          .array(SteeringSchema)
          .max(64)
          .optional()
          .describe(
            "Steer the model into a call at chosen turns (for models that do not call tools on their own, such as the demo model).",
          ),
        expected_stages: z
          .array(z.string().min(1).max(64))
          .max(32)
          .optional()
          .describe("Expected adapter sequence, for adapter-selection accuracy."),
        owner_key: ownerKey.describe(
          "Run it under this owner key (from create_session or an earlier run_task), so that one key reaches the client's traces.",
        ),
      }),
      outputSchema: {
        trace_id: z.string(),
        trace_uri: z.string(),
        policy: z.string(),
        finish: z
          .enum(FINISHES)
          .describe(
            "How the run ended: answer; budget (the final stage spent a budget: the answer is the best the run had); context (the window ended a stage or turn: the answer is the best the run had, possibly empty); degenerate (a model turn looped or repeated its stage: no answer, see degenerate and text); error (the session could not return to the base).",
          ),
        answer: z.string().describe("Empty when the output degenerated."),
        marked: z.boolean(),
        text: z.string().describe("The final text the answer is taken from (also when it is not presented as one)."),
        degenerate: z
          .object({
            rule: z.enum(DEGENERATE_RULES),
            detail: z.string(),
            stage: z.string(),
            adapter: z.string(),
            turn: z.number().describe("The run's first degenerate model turn (1-based)."),
            turns: z.number().describe("Model turns found degenerate in all."),
          })
          .optional()
          .describe(
            "Why the output counts as degenerate: repetition (a turn loops) or no_progress (a turn repeats its stage).",
          ),
        grounded: z
          .boolean()
          .optional()
          .describe(
            "For a marked answer: each of its words occurs in the task or a tool result the run read (true), or one occurs in none (false: nothing the run read states it). Not a judgement of correctness.",
          ),
        cited: z
          .boolean()
          .optional()
          .describe(
            'When the text cites its evidence ("Evidence: ..." lines): each quote occurs word for word in a tool result the run read or a handoff (true), or one does not (false).',
          ),
        stages: z.array(z.string()),
        switches: z.number(),
        rebuilt_tokens: z.number().describe("Tokens the switches evaluated under new weights."),
        reused_tokens: z
          .number()
          .describe("Tokens the switches kept from earlier work under the same weights (cache strategy reuse)."),
        generated_tokens: z.number(),
        time: anyObject(),
        selection_accuracy: z.number().optional(),
        owner_key: z
          .string()
          .optional()
          .describe(
            'Without a bearer token: the secret that owns the run\'s trace, for reading weact://traces/{trace_id} (its _meta "weact-mcp/owner_key") from any connection.',
          ),
      },
    },
    (args, extra) =>
      toolCall(async () => {
        await ctx.sessions.refuseUnfittable([{ name: "task", text: args.task }]);
        const { owner, key } = ctx.owners.forNew(extra, args.owner_key);
        const progress = progressFor(extra, "starting the run");
        try {
          const r = await progress.run(() =>
            runTask(
              ctx.harness,
              owner,
              {
                task: args.task,
                policy: args.policy,
                workflow: args.workflow,
                budgets: args.budgets,
                soft: args.soft,
                seed: args.seed,
                steering: args.steering,
                expectedStages: args.expected_stages,
              },
              {
                signal: extra.signal,
                onProgress: (p) => progress.report(p.message),
              },
            ),
          );
          return ok({
            trace_id: r.traceId,
            trace_uri: `weact://traces/${r.traceId}`,
            policy: r.policy,
            finish: r.finish,
            answer: r.answer,
            marked: r.marked,
            text: r.text,
            ...(r.degenerate ? { degenerate: r.degenerate } : {}),
            ...(r.grounded !== undefined ? { grounded: r.grounded } : {}),
            ...(r.cited !== undefined ? { cited: r.cited } : {}),
            stages: r.stages,
            switches: r.switches,
            rebuilt_tokens: r.rebuiltTokens,
            reused_tokens: r.reusedTokens,
            generated_tokens: r.generatedTokens,
            time: r.time as unknown as Record<string, unknown>,
            ...(r.selectionAccuracy !== undefined ? { selection_accuracy: r.selectionAccuracy } : {}),
            ...(key ? { owner_key: key } : {}),
          });
        } catch (err) {
          // the key reaches a trace the run may have written before it failed
          const keyed = key ? { owner_key: key } : undefined;
          if (err instanceof HarnessError) return fail(`${err.message} [${err.code}]`, keyed);
          if ((err as Error).name === "RunCancelledError")
            return fail("the run was cancelled; its trace records where it stopped", keyed);
          throw err;
        }
      }),
  );
}
