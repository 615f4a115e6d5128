import { LlamaText, type ChatWrapper, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import type {
  CallSyntax,
  ChatCodec,
  Conversation,
  EngineLogger,
  JsonSchemaObject,
  ModelInfo,
  TokenId,
} from "../engine/index.js";
import { loadModel, type ChatTemplateSetting } from "./loadModel.js";
import { renderConversation } from "./render.js";

/**
 * What node-llama-cpp's JSON-schema grammar ends its root rule with: its own stop trigger, which a call's suffix
 * replaces.
 */
const SCHEMA_GRAMMAR_TRAILER = ' "\\n\\n\\n\\n" [\\n]*';

const text = (value: string | LlamaText | undefined) => (value === undefined ? "" : String(value));

/**
 * The text values of a LlamaText with `{{functionName}}` replaced (node-llama-cpp does the same when it writes a call).
 */
function withName(value: string | LlamaText, name: string): LlamaText {
  return LlamaText(value).mapValues((v) => (typeof v === "string" ? v.replaceAll("{{functionName}}", name) : v));
}

/**
 * The base model's tokenizer and chat template from its GGUF (the vocabulary only, no weights), for an engine in
 * another process: prompts are rendered by the same chat wrapper the local engine uses, so a remote engine sees
 * exactly the tokens the local one would evaluate.
 */
export class LlamaChatCodec implements ChatCodec {
  private readonly grammars = new Map<string, Promise<string>>();
  readonly callSyntax: CallSyntax;

  private constructor(
    private readonly llama: Llama,
    private readonly llamaModel: LlamaModel,
    private readonly wrapper: ChatWrapper,
    readonly model: ModelInfo,
  ) {
    const { call, parallelism } = wrapper.settings.functions;
    this.callSyntax = {
      trigger: text(parallelism?.call.sectionPrefix) + text(call.prefix),
      optionalPrefixSpace: call.optionalPrefixSpace ?? false,
      paramsPrefix: text(call.paramsPrefix),
      suffix: text(call.suffix) + text(parallelism?.call.sectionSuffix),
      emptyParams:
        call.emptyCallParamsPlaceholder === undefined || call.emptyCallParamsPlaceholder === ""
          ? ""
          : JSON.stringify(call.emptyCallParamsPlaceholder),
      specialTokens: [],
    };
    // a control token has text only when special tokens are shown
    const syntax = this.callSyntax;
    const controls = (value: string) =>
      [
        ...new Set(
          this.tokenize(value, true).filter(
            (t) => this.detokenize([t], false) === "" && this.detokenize([t], true) !== "",
          ),
        ),
      ].map((t) => this.detokenize([t], true));
    // the model ends its turn at the suffix's first control token (e.g. Qwen's <|im_end|>): that it writes as itself,
    // not as text
    const cut = Math.min(...controls(syntax.suffix).map((c) => syntax.suffix.indexOf(c)), syntax.suffix.length);
    const suffix = syntax.suffix.slice(0, cut);
    this.callSyntax = { ...syntax, suffix, specialTokens: controls(syntax.trigger + syntax.paramsPrefix + suffix) };
  }

  /**
   * Reads the GGUF's vocabulary and chat template after the same checks the local engine makes (no weights are loaded).
   */
  static async load(options: {
    modelPath: string;
    logger: EngineLogger;
    chatTemplate?: ChatTemplateSetting;
  }): Promise<LlamaChatCodec> {
    const { llama, llamaModel, info, chatWrapper } = await loadModel(
      { modelPath: options.modelPath, gpu: false, logger: options.logger, chatTemplate: options.chatTemplate },
      { vocabOnly: true },
    );
    return new LlamaChatCodec(llama, llamaModel, chatWrapper, info);
  }

  get vocabularySize(): number {
    return this.llamaModel.fileInfo.metadata.tokenizer.ggml.tokens.length;
  }

  renderTokens(conversation: Conversation): TokenId[] {
    return renderConversation(this.llamaModel, this.wrapper, conversation).tokens;
  }

  tokenize(value: string, special = false): TokenId[] {
    return this.llamaModel.tokenize(value, special);
  }

  detokenize(tokens: readonly TokenId[], special = false): string {
    return this.llamaModel.detokenize(tokens as readonly Token[], special);
  }

  paramsGrammar(schema: JsonSchemaObject): Promise<string> {
    const key = JSON.stringify(schema);
    let grammar = this.grammars.get(key);
    if (!grammar) {
      grammar = this.llama.createGrammarForJsonSchema(schema as never).then(({ grammar: gbnf }) => {
        const [root, ...rules] = gbnf.split("\n");
        if (!root?.startsWith("root ::= ") || !root.endsWith(SCHEMA_GRAMMAR_TRAILER)) {
          throw new Error(
            `node-llama-cpp's JSON-schema grammar no longer ends its root rule with ${SCHEMA_GRAMMAR_TRAILER}; weact-mcp needs node-llama-cpp 3.21.1 exactly (see package.json)`,
          );
        }
        return [root.slice(0, -SCHEMA_GRAMMAR_TRAILER.length), ...rules].join("\n");
      });
      this.grammars.set(key, grammar);
    }
    return grammar;
  }

  rawCall(name: string, paramsText: string): unknown {
    const { call } = this.wrapper.settings.functions;
    return LlamaText([
      call.prefix,
      name,
      withName(call.paramsPrefix, name),
      paramsText,
      withName(call.suffix, name),
    ]).toJSON();
  }

  async dispose(): Promise<void> {
    await this.llamaModel.dispose();
    await this.llama.dispose();
  }
}
