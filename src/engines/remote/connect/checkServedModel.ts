import { ModelFileError, UnsupportedFeatureError, type Conversation } from "../../../engine/index.js";
import type { EngineHttp } from "../client/EngineHttp.js";
import type { EngineFacts, Flavor } from "../flavors/Flavor.js";
import type { RemoteEngineOptions } from "../remoteEngineOptions.js";

/**
 * Checked against the engine's own tokenizer at connect, as the chat template renders it: turn markers, plain words,
 * digits, punctuation, non-ASCII letters, and the model's own syntax of a function call and its result (Gemma's
 * `||call:` / `||result:`, Qwen's `<tool_call>`, ...), which the engine sees in every prompt after a weight action.
 */
const TOKENIZER_PROBE: Conversation = {
  turns: [
    { role: "system", text: "You are a research agent." },
    { role: "user", text: 'Which river flows through Paris? 777 km, 2 seas; naïve café: "quoted" {json: [1, 2]}' },
    {
      role: "assistant",
      text: "Let me plan first.",
      calls: [{ name: "load_lora", arguments: { adapter: "plan" }, result: "Loaded plan: écrire «le plan»." }],
    },
    { role: "assistant", text: "Plan: search, then write.\n\tDone." },
  ],
  functions: {
    load_lora: {
      description: "Activate a capability adapter.",
      parameters: { type: "object", properties: { adapter: { enum: ["plan", "search", "write"] } } },
    },
  },
};

/**
 * What the engine says about itself, once it is known to serve a model the local tokenizer fits (the same
 * vocabulary, the same tokens for a probe text) and, for an engine that loads PEFT folders, that there is a
 * folder to put them in.
 */
export async function checkServedModel(
  opts: RemoteEngineOptions,
  flavor: Flavor,
  http: EngineHttp,
): Promise<EngineFacts> {
  const { codec } = opts;
  if (flavor.features.adapterForm === "peft" && !opts.adapterDir) {
    throw new UnsupportedFeatureError(
      http.label,
      "GGUF adapters",
      "it loads PEFT folders: set engine.remote.adapterDir to a folder it can read (and localAdapterDir if this server sees it elsewhere)",
    );
  }
  const facts = await flavor.inspect(http, opts.model);
  const gguf = codec.model.filePath;
  if (facts.vocabularySize !== undefined && facts.vocabularySize !== codec.vocabularySize) {
    throw new ModelFileError(
      gguf,
      `its vocabulary has ${codec.vocabularySize} tokens but ${http.label} serves a model with ${facts.vocabularySize}: point model.path at the GGUF of the model the engine serves`,
    );
  }
  const probe = codec.detokenize(codec.renderTokens(TOKENIZER_PROBE), true);
  const theirs = await flavor.tokenize(http, probe);
  const ours = codec.tokenize(probe, true);
  if (theirs && theirs.join(",") !== ours.join(",")) {
    const at = ours.findIndex((t, i) => t !== theirs[i]);
    throw new ModelFileError(
      gguf,
      `it tokenizes text differently from ${http.label} (${ours.length} tokens here, ${theirs.length} there; first difference at token ${at < 0 ? ours.length : at}, after ${JSON.stringify(codec.detokenize(ours.slice(Math.max(0, at - 8), Math.max(0, at)), true))}): point model.path at the GGUF of the model the engine serves`,
    );
  }
  return facts;
}
