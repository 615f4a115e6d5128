import { readFileSync, statSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import writeFileAtomic from "write-file-atomic";
import { z } from "zod";
import { StageBudgetSchema } from "../budgets/budgets.js";
import { checkMergeSettings, MergeSettingsFields } from "./merge/settings.js";

export const ALIAS_PATTERN = /^[a-z][a-z0-9_-]{0,31}$/;

/**
 * The base model's name where weights are named (traces, policies, `export --capability`): never an adapter's
 * alias. As a capability its turns decide which adapter to load and when the task is done.
 */
export const BASE_CAPABILITY = "base";

/**
 * How a static merge (`weact-mcp merge`) was made: its settings and the adapters it merged, in the weights' order.
 * An entry with this record is not a capability of its own: the model is not offered it (load_lora, the workflow,
 * `static`); the `static:<method>` policies run it.
 */
export const MergeRecordSchema = MergeSettingsFields.extend({
  of: z.array(z.string().regex(ALIAS_PATTERN)).min(1).max(64),
})
  .strict()
  .superRefine((r, ctx) => {
    checkMergeSettings(r, ctx);
    if (r.weights.length !== r.of.length)
      ctx.addIssue({
        code: "custom",
        path: ["weights"],
        message: `one weight per merged adapter: ${r.weights.length} for ${r.of.length}`,
      });
  });

export const ManifestEntrySchema = z
  .object({
    alias: z
      .string()
      .regex(
        ALIAS_PATTERN,
        "alias must be lowercase letters, digits, '-' or '_', starting with a letter, at most 32 characters",
      )
      .refine(
        (a) => a !== BASE_CAPABILITY,
        `alias "${BASE_CAPABILITY}" names the base model (in traces, policies and export --capability): choose another`,
      ),
    description: z
      .string()
      .min(1, "describe the capability: the model reads it in the load_lora tool description")
      .max(1000)
      .describe("The capability, as the model will read it in load_lora's description."),
    file: z
      .string()
      .min(1, "file: path of the GGUF LoRA, relative to the manifest")
      .max(4096)
      .describe("GGUF LoRA file, relative to the manifest's folder or absolute (must be inside adapters.allowedDirs)."),
    scale: z.number().positive().max(16).default(1),
    peft: z
      .string()
      .min(1)
      .max(4096)
      .optional()
      .describe(
        "The same adapter as a PEFT folder (adapter_config.json + adapter_model.safetensors), relative to the manifest's folder: what vLLM and SGLang load instead of a PEFT export of the GGUF.",
      ),
    /** Per-stage limits; any left out fall back to the config file, then the built-in defaults. */
    budget: StageBudgetSchema.partial().optional(),
    activation: z.string().max(2000).optional(),
    release: z.string().max(2000).optional(),
    merge: MergeRecordSchema.optional().describe("Set on a static merge of other adapters (weact-mcp merge)."),
    baseSha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, "baseSha256 must be the base model's SHA-256: 64 lowercase hex digits")
      .optional()
      .describe(
        "The SHA-256 of the base model GGUF the adapter was made for (written by import-peft, the training steps and register_adapter): an adapter recorded for another base is refused. Same shapes do not mean the same checkpoint.",
      ),
  })
  .strict();

export const ManifestSchema = z
  .object({
    $schema: z.string().optional(),
    adapters: z.array(ManifestEntrySchema),
  })
  .strict()
  .superRefine((m, ctx) => {
    const seen = new Set<string>();
    m.adapters.forEach((a, i) => {
      if (seen.has(a.alias))
        ctx.addIssue({ code: "custom", path: ["adapters", i, "alias"], message: `alias "${a.alias}" is listed twice` });
      seen.add(a.alias);
    });
  });

export type ManifestEntry = z.infer<typeof ManifestEntrySchema>;

/**
 * The fields a client sets when it registers or refreshes an adapter on a running server: an entry's, budgets aside.
 */
export const AdapterFieldsSchema = ManifestEntrySchema.pick({
  alias: true,
  file: true,
  description: true,
  scale: true,
  peft: true,
  activation: true,
  release: true,
  baseSha256: true,
});
export type AdapterFields = z.input<typeof AdapterFieldsSchema>;

/** A manifest entry with its file resolved against the manifest's folder. */
export interface LibraryEntry extends ManifestEntry {
  filePath: string;
}

export class ManifestError extends Error {
  constructor(
    readonly file: string,
    readonly issues: readonly string[],
  ) {
    super(`adapter manifest ${file} is invalid: ${issues.join("; ")}`);
    this.name = "ManifestError";
  }
}

/** Formats zod issues as "path.to.field: message" so an error names the field to fix. */
export function describeIssues(error: z.ZodError): string[] {
  return error.issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`);
}

export function parseManifest(raw: unknown, file: string): LibraryEntry[] {
  const parsed = ManifestSchema.safeParse(raw);
  if (!parsed.success) throw new ManifestError(file, describeIssues(parsed.error));
  return parsed.data.adapters.map((a) => ({ ...a, filePath: resolve(dirname(file), a.file) }));
}

/**
 * Which file a path holds: an atomic save is a new inode, an edit in place a new modification time. Tells the
 * library's own last write from anyone else's edit without reading the file.
 */
export interface ManifestStamp {
  dev: bigint;
  ino: bigint;
  size: bigint;
  mtimeNs: bigint;
}

/** The manifest's stamp now; undefined when it cannot be read (then it is not the library's write). */
export function manifestStamp(file: string): ManifestStamp | undefined {
  const stats = statSync(file, { bigint: true, throwIfNoEntry: false });
  return stats && { dev: stats.dev, ino: stats.ino, size: stats.size, mtimeNs: stats.mtimeNs };
}

export const sameStamp = (a: ManifestStamp, b: ManifestStamp | undefined): boolean =>
  b !== undefined && a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs;

/**
 * Writes the library back as a manifest (files relative to its folder), atomically: a reader (the watcher, another
 * process) sees the old file or the new one, never half of it. Only the library writes manifests. Returns the
 * written file's stamp.
 */
export function saveManifest(file: string, entries: readonly LibraryEntry[]): ManifestStamp | undefined {
  const adapters = entries.map(({ filePath, ...entry }) => ({
    ...entry,
    file: relative(dirname(file), filePath) || entry.file,
  }));
  writeFileAtomic.sync(file, JSON.stringify({ adapters }, null, 2) + "\n");
  return manifestStamp(file);
}

/**
 * Adds one entry to a manifest on disk (import-peft, merge), refusing an alias it already lists unless `replaces`
 * accepts that entry: then the new one takes its place (a merge made again).
 */
export function addManifestEntry(
  file: string,
  entry: LibraryEntry,
  replaces: (listed: LibraryEntry) => boolean = () => false,
): void {
  const entries = loadManifest(file);
  const listed = entries.find((e) => e.alias === entry.alias);
  if (listed && !replaces(listed)) throw new ManifestError(file, [`alias "${entry.alias}" is listed already`]);
  saveManifest(file, listed ? entries.map((e) => (e === listed ? entry : e)) : [...entries, entry]);
}

export function loadManifest(file: string): LibraryEntry[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new ManifestError(file, [`cannot read it as JSON: ${(err as Error).message}`]);
  }
  return parseManifest(raw, file);
}
