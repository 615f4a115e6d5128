/**
 * The public node-llama-cpp API the local engine uses, in one place: every import of node-llama-cpp stays inside
 * src/engines/local/llama/ (its private members only in internals.ts), so what an upgrade of the pinned version must
 * keep is
 * listed here and there.
 */
export {
  JinjaTemplateChatWrapper,
  LlamaChat,
  LlamaLogLevel,
  LlamaText,
  TokenBias,
  getLlama,
  resolveChatWrapper,
} from "node-llama-cpp";
export type {
  ChatHistoryItem,
  ChatModelFunctionCall,
  ChatModelFunctions,
  ChatModelResponse,
  ChatWrapper,
  Llama,
  LlamaContext,
  LlamaContextSequence,
  LlamaModel,
  Token,
} from "node-llama-cpp";
