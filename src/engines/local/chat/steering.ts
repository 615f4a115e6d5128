import { SteeredCallError, type FunctionSpec } from "../../../engine/index.js";
import { LlamaText, type ChatWrapper, type LlamaModel, type Token } from "node-llama-cpp";
import { argumentsBound, BEYOND_ANY_CONTEXT } from "./callBound.js";

/** node-llama-cpp's function-calling grammar ends a call's arguments with four newlines. */
const ARGUMENTS_END = 4;

/** How a turn is steered into a call (what `generationBias` forces). */
export interface CallSteering {
  /** The tokens forced at the start of the response: the template's call prefix, and the name when given. */
  tokens: readonly Token[];
  /** From this many response tokens on, the closing of the call's arguments is forced (callBound.ts). */
  closeAfter: number;
  /** The token of each character that closes a JSON value. */
  closers: Readonly<Record<'"' | "}" | "]", Token>>;
}

/**
 * The steering of a turn into a call of `name` (a name the turn may not call leaves the choice to the grammar, as no
 * name does): its forced tokens, and where its closing starts so that the call ends within `room` tokens. Refused
 * with a `SteeredCallError` when no function is callable, or when even the call's forced start and its longest
 * closing do not fit.
 */
export function steerCall(
  model: LlamaModel,
  wrapper: ChatWrapper,
  functions: Readonly<Record<string, FunctionSpec>>,
  callable: readonly string[],
  name: string | undefined,
  room: { maxTokens: number; requested: number },
): CallSteering {
  const callableNow = callable.filter((n) => functions[n]);
  const named = name !== undefined && callableNow.includes(name) ? name : undefined;
  const candidates = named ? [named] : callableNow;
  if (!candidates.length)
    throw new SteeredCallError("cannot steer the turn into a call: no function is callable in it");
  const { call, parallelism } = wrapper.settings.functions;
  // a wrapper with a parallel-call section (Mistral's [TOOL_CALLS][) only parses calls that open it
  const opening = [parallelism?.call.sectionPrefix ?? "", call.prefix];
  // the name tokenized after the prefix, as the model reads it: alone, a tokenizer may start it with a space the
  // function-name grammar refuses, and the model then writes a call of another function
  const tokens = LlamaText([...opening, named ?? ""]).tokenize(model.tokenizer);
  // the longest closing any candidate may need, after its start (which node-llama-cpp completes with the arguments'
  // prefix once the name is written, without sampling: it cannot be stopped half-way)
  const needs = candidates.map((n) => {
    const params = functions[n]!.parameters;
    const paramsPrefix = LlamaText(call.paramsPrefix).mapValues((v) =>
      typeof v === "string" ? v.replaceAll("{{functionName}}", n) : v,
    );
    const start = LlamaText([...opening, n, ...(params ? [paramsPrefix] : [])]).tokenize(model.tokenizer).length;
    const closing = params ? argumentsBound(params) + ARGUMENTS_END : 0;
    return { name: n, start, closing, total: start + closing };
  });
  const need = needs.reduce((a, b) => (b.total > a.total ? b : a));
  if (need.closing >= BEYOND_ANY_CONTEXT)
    throw new SteeredCallError(
      `a steered call of ${need.name} cannot fit in any context: the items and characters its parameters require (minItems, minLength, nested) are more tokens than a context holds; lower them`,
    );
  if (need.total > room.maxTokens)
    throw new SteeredCallError(
      `a steered call of ${need.name} may take ${need.total} tokens on this model (${need.start} to open it, up to ${need.closing} to close its arguments) but the turn has ${room.maxTokens}: ` +
        (room.maxTokens < room.requested
          ? `the context window leaves no more; shorten the history or raise model.contextSize`
          : `raise max_tokens to ${need.total} or more`),
      {
        call: need.name,
        needed: need.total,
        available: room.maxTokens,
        limit: room.maxTokens < room.requested ? "context" : "max_tokens",
      },
    );
  return {
    tokens,
    closeAfter: room.maxTokens - Math.max(...needs.map((n) => n.closing)),
    closers: closerTokens(model),
  };
}

/** The tokens that end a JSON string, object or array. */
function closerTokens(model: LlamaModel): Record<'"' | "}" | "]", Token> {
  const token = (c: string) => model.tokenize(c, false, "trimLeadingSpace")[0]!;
  return { '"': token('"'), "}": token("}"), "]": token("]") };
}
