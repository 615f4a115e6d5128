import type { Response } from "express";
import type { ModelCall } from "../harness/driver.js";
import { runTask, type ClientResult, type HarnessDeps, type TaskResult } from "../harness/runTaskUnderPolicy.js";
import type { Policy } from "../harness/types.js";
import type { Logger } from "../log.js";
import { Continuations } from "./continuations.js";
import { mapConversation } from "./conversation.js";
import { OpenAIError, toOpenAIError, type TurnLimits } from "./errors.js";
import { policyOf } from "./models.js";
import { inputFields, type ChatRequest, type ChatTool } from "./request.js";
import { Responder } from "./responder.js";

/** Who is asking: the identity continuations are bound to, and the owner its sessions count against. */
export interface Caller {
  identity: string | undefined;
  owner: string;
}

/** A run in progress: its current responder (it changes with each continuation). */
interface ActiveRun {
  responder: Responder;
  /** A forced tool_choice applies to the first model turn of each request. */
  force: { name?: string } | undefined;
  /** What limits the current request's turns (a forced call that cannot fit is refused naming them). */
  limits: TurnLimits;
}

/**
 * Chat completions run the WeAct loop server-side: the request's model is the policy, the last user message the
 * task; the weight actions stay internal. Client-declared tools suspend the run until a continuation brings
 * their results (or it expires).
 */
export class ChatCompletions {
  private readonly continuations: Continuations<{ res: Response; request: ChatRequest }>;

  constructor(
    private readonly harness: HarnessDeps,
    private readonly defaultSystem: string,
    private readonly logger: Logger,
    continuationSeconds: number,
  ) {
    this.continuations = new Continuations(continuationSeconds * 1000);
  }

  /** Cancels the runs waiting on clients (shutdown). */
  close(): void {
    this.continuations.closeAll();
  }

  /** Runs waiting on a client's tools (each holds its session). */
  get suspended(): number {
    return this.continuations.size;
  }

  async complete(request: ChatRequest, caller: Caller, res: Response): Promise<void> {
    const policy = policyOf(request.model, this.harness.library);
    if (request.user)
      this.logger.info({ user: request.user, owner: caller.owner, model: request.model }, "chat completion");
    forcedCall(request); // a bad tool_choice is refused before a run is started or continued
    await this.harness.sessions.refuseUnfittable(inputFields(request)).catch((err: unknown) => {
      throw toOpenAIError(err, false);
    });
    const taken = this.continuations.take(caller.identity, request.messages);
    if (taken) return taken.resume(taken.results, { res, request });
    await this.start(policy, request, caller, res);
  }

  private responderFor(
    res: Response,
    request: ChatRequest,
    controller: AbortController,
    info: { trace_id: string; policy: string; continued: boolean },
  ): Responder {
    const responder = new Responder(
      res,
      request.model,
      Boolean(request.stream),
      Boolean(request.stream_options?.include_usage),
      info,
    );
    // a client that goes away before its answer cancels the run: its slot is freed and its trace ends cancelled
    res.once("close", () => {
      if (!responder.finished) controller.abort();
    });
    return responder;
  }

  private async start(policy: Policy, request: ChatRequest, caller: Caller, res: Response): Promise<void> {
    const conversation = mapConversation(request.messages, this.defaultSystem);
    const clientTools = request.tool_choice === "none" ? {} : toolSpecs(request.tools ?? []);
    const maxTokens = request.max_completion_tokens ?? request.max_tokens ?? undefined;
    const workflow = this.harness.config.workflow;
    const controller = new AbortController();
    const run: ActiveRun = {
      force: forcedCall(request),
      limits: {
        requested: request.max_completion_tokens
          ? { param: "max_completion_tokens", tokens: request.max_completion_tokens }
          : request.max_tokens
            ? { param: "max_tokens", tokens: request.max_tokens }
            : undefined,
        maxTokensPerTurn: this.harness.config.maxTokensPerTurn,
      },
      responder: this.responderFor(res, request, controller, { trace_id: "", policy, continued: false }),
    };
    let traceId = "";
    const isFinal = (stage: string) =>
      policy === "hard"
        ? stage === `${workflow.length}:${workflow.at(-1)}`
        : policy === "soft"
          ? stage.endsWith(":write")
          : true;
    let messagesSoFar = request.messages;

    const awaitClient = (calls: ModelCall[], signal: AbortSignal) =>
      new Promise<ClientResult[]>((resolve, reject) => {
        const { id, message } = this.continuations.suspend(
          caller.identity,
          calls,
          messagesSoFar,
          run.responder.content || null,
          {
            resume: (results, next) => {
              messagesSoFar = next.request.messages;
              run.force = forcedCall(next.request);
              // the run keeps the budget of the request that started it
              run.limits = { ...run.limits, requested: undefined };
              run.responder = this.responderFor(next.res, next.request, controller, {
                trace_id: traceId,
                policy,
                continued: true,
              });
              run.responder.begin({ trace_id: traceId, policy, continued: true });
              resolve(results);
            },
            expire: () => {
              this.logger.info(
                { trace: traceId, owner: caller.owner },
                "a run waiting on the client's tools expired (openai.continuationSeconds)",
              );
              controller.abort();
            },
          },
        );
        signal.addEventListener("abort", () => reject(new Error("the run was cancelled while waiting on the client")), {
          once: true,
        });
        run.responder.toolCalls(message, id);
      });

    let result: TaskResult;
    try {
      result = await runTask(
        this.harness,
        caller.owner,
        {
          task: conversation.task,
          policy,
          seed: request.seed ?? undefined,
          ...(maxTokens ? { budgets: { tokens: maxTokens }, soft: { tokens: maxTokens } } : {}),
        },
        {
          signal: controller.signal,
          conversation,
          clientTools,
          awaitClient,
          temperature: request.temperature ?? undefined,
          stop: request.stop == null ? undefined : typeof request.stop === "string" ? [request.stop] : request.stop,
          forceCall: () => {
            const force = run.force;
            run.force = undefined;
            return force;
          },
          onStart: (ids) => {
            traceId = ids.traceId;
            run.responder.begin({ trace_id: traceId, policy, continued: false });
          },
          onEvent: (e) => {
            if (e.type === "run_start") return;
            run.responder.event(e);
          },
          onText: (chunk, stage, route) =>
            isFinal(stage) ? run.responder.text(chunk) : run.responder.stageText(chunk, stage, route),
        },
      );
    } catch (err) {
      run.responder.fail(toOpenAIError(err, controller.signal.aborted, run.limits));
      return;
    }
    run.responder.answer(result);
  }
}

/** `tool_choice` naming a function (or `required` with one tool) steers the first model turn of the request into it. */
function forcedCall(request: ChatRequest): { name?: string } | undefined {
  const choice = request.tool_choice;
  if (choice === undefined || choice === "auto" || choice === "none") return undefined;
  const names = (request.tools ?? []).map((t) => t.function.name);
  if (choice === "required") {
    if (names.length !== 1)
      throw new OpenAIError(
        400,
        'tool_choice "required" is honoured with exactly one tool; name the function instead ({type: "function", function: {name}})',
        "invalid_request_error",
        "tool_choice",
        "unsupported_value",
      );
    return { name: names[0] };
  }
  if (!names.includes(choice.function.name))
    throw new OpenAIError(
      400,
      `tool_choice names "${choice.function.name}", which is not in tools`,
      "invalid_request_error",
      "tool_choice.function.name",
      "invalid_value",
    );
  return { name: choice.function.name };
}

function toolSpecs(tools: readonly ChatTool[]) {
  return Object.fromEntries(
    tools.map((t) => [
      t.function.name,
      {
        description: t.function.description ?? "",
        parameters: (t.function.parameters ?? { type: "object", properties: {} }) as never,
      },
    ]),
  );
}
