import type { JsonSchemaObject, ModelInfo, TokenId, Conversation } from "./types.js";

/**
 * How the model's chat template writes a tool call, as plain text. `{{functionName}}` in `paramsPrefix` and
 * `suffix` stands for the called function's name.
 */
export interface CallSyntax {
  /**
   * The text that opens a call in a response (the parallel-call section's opening included): what the grammar and
   * steering force.
   */
  trigger: string;
  /** A space may come between the trigger and the name. */
  optionalPrefixSpace: boolean;
  paramsPrefix: string;
  /**
   * What the model writes to close the call (and its section), up to where its turn ends (the template's end-of-turn
   * token).
   */
  suffix: string;
  /** The parameters written for a function that has none ("" or e.g. "{}"). */
  emptyParams: string;
  /**
   * The special tokens (by text) in the trigger, parameters prefix and suffix: an engine must show them in its output
   * text.
   */
  specialTokens: readonly string[];
}

/**
 * The base model's own tokenizer and chat template, read from its GGUF, for an engine that does not render
 * prompts itself: a remote engine renders and tokenizes every prompt here exactly as the local engine would,
 * sends token ids, builds the function-calling grammar from the same template and parses the calls it writes.
 */
export interface ChatCodec {
  readonly model: ModelInfo;
  /** Tokens in the vocabulary: a full next-token distribution has this many entries. */
  readonly vocabularySize: number;
  readonly callSyntax: CallSyntax;
  /** Tokens of the rendered conversation, including the assistant turn's opening (Engine.renderTokens). */
  renderTokens(conversation: Conversation): TokenId[];
  /** `special`: text like "<tool_call>" becomes the special token, as the template writes it. */
  tokenize(text: string, special?: boolean): TokenId[];
  detokenize(tokens: readonly TokenId[], special?: boolean): string;
  /**
   * A GBNF grammar for a function's parameters as the local engine constrains them (node-llama-cpp's JSON-schema
   * grammar): rules one per line, the first one named `root`.
   */
  paramsGrammar(schema: JsonSchemaObject): Promise<string>;
  /**
   * A call as it was written, in the form the renderer replays (`AnsweredCall.raw`), so re-rendering gives its tokens.
   */
  rawCall(name: string, paramsText: string): unknown;
  dispose(): Promise<void>;
}
