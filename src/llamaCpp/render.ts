import { JinjaTemplateChatWrapper, LlamaText, SpecialTokensText } from "node-llama-cpp";
import type {
  ChatHistoryItem,
  ChatModelFunctionCall,
  ChatModelFunctions,
  ChatModelResponse,
  ChatWrapper,
  LlamaModel,
  Token,
} from "node-llama-cpp";
import { commonPrefixLength, InvalidConversationError } from "../engine/index.js";
import type { Conversation, FunctionSpec, HistorySoFar } from "../engine/index.js";

export function toChatModelFunctions(
  functions: Readonly<Record<string, FunctionSpec>>,
  only?: readonly string[],
): ChatModelFunctions {
  const out: Record<string, { description: string; params?: unknown }> = {};
  for (const [name, spec] of Object.entries(functions)) {
    if (only && !only.includes(name)) continue;
    out[name] = spec.parameters
      ? { description: spec.description, params: spec.parameters }
      : { description: spec.description };
  }
  return out as ChatModelFunctions;
}

/**
 * node-llama-cpp's chat history for `conversation`, ending with the model response to generate into.
 * Consecutive assistant turns joined by tool results form one model response, as the chat template
 * renders them (results between the calls and the continuation).
 */
export function toChatHistory(conversation: Conversation, inlineCalls = false): ChatHistoryItem[] {
  const items: ChatHistoryItem[] = [];
  let continuing = false; // the last model response ended with answered calls: the model continues it
  for (const [index, turn] of conversation.turns.entries()) {
    if (turn.role !== "assistant") {
      items.push({ type: turn.role, text: turn.text });
      continuing = false;
      continue;
    }
    const last = items.at(-1);
    const response: ChatModelResponse =
      continuing && last?.type === "model" ? (last as ChatModelResponse) : { type: "model", response: [] };
    if (response !== last) items.push(response);
    if (turn.text) response.response.push(inlineCalls && turn.calls?.length ? onItsOwnLine(turn.text) : turn.text);
    (turn.calls ?? []).forEach((call, i) => {
      if (typeof call.result !== "string")
        throw new InvalidConversationError(`turn ${index}: tool call ${call.name} has no result yet`);
      const item: ChatModelFunctionCall = {
        type: "functionCall",
        name: call.name,
        description: conversation.functions[call.name]?.description,
        params: call.arguments,
        result: call.result,
        // an inline call is replayed as documented: its raw form is the generation view's (inlineCallView)
        ...(call.raw !== undefined && !inlineCalls ? { rawCall: call.raw as ChatModelFunctionCall["rawCall"] } : {}),
        ...(i === 0 ? { startsNewChunk: true } : {}),
      };
      response.response.push(item);
    });
    continuing = (turn.calls?.length ?? 0) > 0;
  }
  if (!continuing) items.push({ type: "model", response: [] });
  return items;
}

/**
 * Whether the template uses node-llama-cpp's own inline call syntax (`||call: name({...})`, what it prompts models whose
 * template has no function calling, Gemma 3's among them).
 */
export function usesInlineCalls(wrapper: ChatWrapper): boolean {
  const prefix = wrapper.settings.functions.call.prefix;
  return typeof prefix === "string" && prefix.startsWith("||call:");
}

/**
 * A view of an inline-call wrapper (usesInlineCalls) that generates calls as the model writes them. node-llama-cpp
 * 3.21.1 detects a call at `||call:`, then puts its canonical prefix `||call: ` into the context, the trailing space
 * as a token of its own, before the function-name grammar runs: a model that writes the name with its leading space
 * (Gemma 3's " off" of offload_lora) reads a lone space it was never shown there, and the name that comes out is
 * another function's (measured on Gemma 3 270M, plain node-llama-cpp too: the code adapter put 1.0 on " off" after a
 * run_code result, and a call of search came out; the model's own text was the right call). The view's prefix is
 * `||call:`, so nothing is put in, and the name grammar's optional space takes the model's; every call is still
 * rendered as documented (`||call: name(...)`), by the wrapper's own generateFunctionCall.
 */
function inlineCallView(inner: ChatWrapper): ChatWrapper {
  const view = Object.create(inner) as ChatWrapper;
  const { functions } = inner.settings;
  Object.defineProperty(view, "settings", {
    value: {
      ...inner.settings,
      functions: { ...functions, call: { ...functions.call, prefix: "||call:", optionalPrefixSpace: true } },
    },
  });
  view.generateFunctionCall = (name, params) => inner.generateFunctionCall(name, params);
  return view;
}

/**
 * Text that a call follows, on a line of its own (usesInlineCalls): how the Gemma 3 library's adapters learned to write
 * it, when a call right after text on the same line came out as another function's (inlineCallView's case) and one
 * starting a line happened to parse.
 */
export const onItsOwnLine = (text: string) => (text.endsWith("\n") ? text : `${text}\n`);

/**
 * A view of `inner` that always documents `documented` in the prompt, whatever subset the grammar
 * offers: the prompt prefix then stays the same across adapter switches and its KV stays reusable.
 */
export function documentingWrapper(inner: ChatWrapper, documented: ChatModelFunctions): ChatWrapper {
  const view = Object.create(inner) as ChatWrapper;
  view.generateContextState = (options) =>
    inner.generateContextState.call(view, { ...options, availableFunctions: documented });
  return view;
}

export interface RenderedConversation {
  history: ChatHistoryItem[];
  wrapper: ChatWrapper;
  /** The prompt as the model reads it, ending with the opening of the response to generate. */
  tokens: Token[];
}

export function renderConversation(
  model: LlamaModel,
  chatWrapper: ChatWrapper,
  conversation: Conversation,
): RenderedConversation {
  const inline = usesInlineCalls(chatWrapper);
  const history = toChatHistory(conversation, inline);
  const view = inline ? inlineCallView(chatWrapper) : chatWrapper;
  const wrapper = documentingWrapper(
    chatWrapper instanceof JinjaTemplateChatWrapper ? templateTextView(model, view) : view,
    toChatModelFunctions(conversation.functions),
  );
  const { contextText } = wrapper.generateContextState({ chatHistory: history });
  return { history, wrapper, tokens: contextText.tokenize(model.tokenizer) };
}

/**
 * A Jinja template's wrapper whose rendered text tokenizes as Hugging Face tokenizes `apply_chat_template`'s text
 * (templateText). The engine renders the prompt with it and node-llama-cpp's LlamaChat generates with it, so both
 * read the same tokens: with the template's own pieces, LlamaChat would tokenize the prompt otherwise, evaluate it
 * again from the first difference, and the model would read tokens training never rendered.
 */
function templateTextView(model: LlamaModel, inner: ChatWrapper): ChatWrapper {
  const view = Object.create(inner) as ChatWrapper;
  view.generateContextState = (options) => {
    const state = inner.generateContextState.call(view, options);
    return { ...state, contextText: templateText(model, state.contextText) };
  };
  return view;
}

/**
 * A rendered Jinja template as Hugging Face tokenizes `apply_chat_template`'s text: each run of text between control
 * tokens one string, tokenized whole, and each control token alone. node-llama-cpp's own LlamaText.tokenize cuts at
 * every piece the template wrote (its text tokenized apart from the messages' text beside it: "\n\n" then "You" where
 * the model saw "\n\nYou"). Control tokens come only from the template's own text, never from a message's: text a
 * client sent stays text.
 */
function templateText(model: LlamaModel, text: LlamaText): LlamaText {
  const values: LlamaText["values"][number][] = [];
  for (const value of text.values) {
    if (typeof value === "string") values.push(value);
    else if (value instanceof SpecialTokensText) {
      let at = 0;
      for (const token of model.tokenize(value.value, true, "trimLeadingSpace")) {
        // a control token reads as nothing without special tokens shown
        if (model.detokenize([token], false) !== "") continue;
        const control = model.detokenize([token], true);
        const found = value.value.indexOf(control, at);
        if (control === "" || found < 0) continue;
        values.push(value.value.slice(at, found), new SpecialTokensText(control));
        at = found + control.length;
      }
      values.push(value.value.slice(at));
    } else values.push(value);
  }
  return LlamaText(values);
}

/**
 * The tokens of `soFar` that no awaited result can change: the prompt rendered with two different stand-in
 * results agrees up to where the first result begins (less any token the result could merge into).
 */
export function settledTokens(model: LlamaModel, chatWrapper: ChatWrapper, soFar: HistorySoFar): Token[] {
  const withResults = (result: string): Conversation => {
    const turns = [...soFar.conversation.turns];
    const last = turns.pop();
    if (last?.role !== "assistant")
      throw new InvalidConversationError(
        "the history so far must end with the model's turn that made the awaited calls",
      );
    return {
      ...soFar.conversation,
      turns: [...turns, { ...last, calls: [...(last.calls ?? []), ...soFar.awaiting.map((c) => ({ ...c, result }))] }],
    };
  };
  const a = renderConversation(model, chatWrapper, withResults("0")).tokens;
  return a.slice(0, commonPrefixLength(a, renderConversation(model, chatWrapper, withResults("1")).tokens));
}
