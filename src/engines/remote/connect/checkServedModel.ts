import { ModelFileError, UnsupportedFeatureError } from "../../../engine/index.js";
import type { EngineHttp } from "../client/EngineHttp.js";
import type { EngineFacts, Flavor } from "../flavors/Flavor.js";
import type { RemoteEngineOptions } from "../options.js";

/** Checked against the engine's own tokenizer at connect: plain words, digits, punctuation, and the call syntax. */
const TOKENIZER_PROBE = 'Which river flows through Paris? 777 km, 2 seas; naïve café: "quoted" {json: [1, 2]}\n';

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
  const theirs = await flavor.tokenize(http, TOKENIZER_PROBE);
  const ours = codec.tokenize(TOKENIZER_PROBE, true);
  if (theirs && theirs.join(",") !== ours.join(",")) {
    throw new ModelFileError(
      gguf,
      `it tokenizes text differently from ${http.label} (${ours.length} tokens here, ${theirs.length} there): point model.path at the GGUF of the model the engine serves`,
    );
  }
  return facts;
}
