/** Every error src/modelFiles throws on purpose: `code` is stable for programs, the message is for people. */
export abstract class ModelError extends Error {
  abstract readonly code: string;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** `fetch-model` was given a name the catalog does not have. */
export class UnknownModelError extends ModelError {
  readonly code = "unknown_model";
  constructor(
    readonly model: string,
    readonly known: readonly string[],
  ) {
    super(`unknown model "${model}": fetch-model knows ${known.join(", ")}`);
  }
}

/** A known model was named (`--model`, `doctor`) but is not in the cache, verified, yet. */
export class ModelNotFetchedError extends ModelError {
  readonly code = "model_not_fetched";
  constructor(
    readonly model: string,
    readonly path: string,
  ) {
    super(`model ${model} is not fetched yet (no verified ${path}): run \`weact-mcp fetch-model ${model}\` first`);
  }
}

/** Why one source could not deliver the model. */
export interface SourceFailure {
  /** The source and what was asked of it, as a person would look it up. */
  readonly source: string;
  /** One line. */
  readonly reason: string;
}

/** No source delivered a file that verifies: each one's reason, and what to do. */
export class ModelFetchError extends ModelError {
  readonly code = "model_fetch_failed";
  constructor(
    readonly model: string,
    readonly failures: readonly SourceFailure[],
    readonly help: string,
    /** The cached file that was there and did not verify, with why; it is not served. */
    readonly invalidCached?: string,
  ) {
    super(
      [
        `could not fetch model ${model}; every source failed:`,
        ...failures.map((f) => `  - ${f.source}: ${f.reason}`),
        ...(invalidCached ? [`  (the cached file did not verify and is not used: ${invalidCached})`] : []),
        help,
      ].join("\n"),
    );
  }
}
