import { existsSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import { adapterDirs, type ResolvedConfig } from "../config/loadConfig.js";
import { ALORA_INVOCATION_KEY, readGgufHeader } from "../gguf/index.js";
import { isInsideDirs } from "../library/confine.js";
import {
  ALIAS_PATTERN,
  addManifestEntry,
  describeIssues,
  loadManifest,
  ManifestEntrySchema,
  type LibraryEntry,
} from "../library/manifest.js";
import { effectiveSettings, mergeAdapters, MergeSettingsSchema, type MergeSettings } from "../library/merge/index.js";
import { mergePolicy } from "../harness/types.js";
import { UsageError } from "./commands.js";

export interface MergeFlags {
  method?: string;
  density?: string;
  weights?: string;
  seed?: number;
  of?: string;
  out?: string;
  alias?: string;
}

/**
 * `weact-mcp merge --method M --out F.gguf`: the library's adapters merged into one GGUF LoRA (PEFT's linear, ties or
 * dare_ties), added to the manifest as an entry with its `merge` record (or replacing the merge of that alias). Every
 * flag is checked before a tensor is read.
 */
export async function mergeCommand(config: ResolvedConfig, flags: MergeFlags): Promise<void> {
  const manifest = config.manifestPath;
  const entries = loadManifest(manifest);
  const of = mergedEntries(entries, flags.of);
  const settings = mergeSettings(flags, of);
  const alias = flags.alias ?? `static-${settings.method}`;
  if (!ALIAS_PATTERN.test(alias))
    throw new UsageError(
      `--alias: "${alias}" is not an alias: lowercase letters, digits, '-' or '_', starting with a letter, at most 32 characters`,
    );
  const replaced = entries.find((e) => e.alias === alias);
  if (replaced && !replaced.merge)
    throw new UsageError(
      `--alias: the manifest's adapter "${alias}" is not a merge, so a merge does not replace it; choose another --alias`,
    );
  if (!flags.out) throw new UsageError("merge needs --out FILE.gguf: where the merged adapter goes");
  const outFile = resolve(flags.out);
  const dirs = adapterDirs(config);
  // a file outside the adapter folders would be written, listed, and then refused by the server
  if (!isInsideDirs(outFile, dirs))
    throw new UsageError(
      `--out: ${outFile} is outside the adapter folders (${dirs.join(", ")}); write it there or set adapters.allowedDirs`,
    );
  const existed = existsSync(outFile);
  if (existed && (!replaced || resolve(replaced.filePath) !== outFile))
    throw new UsageError(
      `--out: ${outFile} exists${replaced ? ` and is not the file of the merge "${alias}" it replaces` : ""}; choose a new file`,
    );
  const entry = ManifestEntrySchema.safeParse({
    alias,
    description: `Static ${settings.method} merge of ${of.map((e) => e.alias).join(", ")}, with weights ${settings.weights.join(", ")} (weact-mcp merge); policy ${mergePolicy(settings.method)} runs it.`,
    file: outFile,
    merge: { ...settings, of: of.map((e) => e.alias) },
  });
  if (!entry.success) throw new UsageError(describeIssues(entry.error).join("; "));

  const result = await mergeAdapters({
    adapters: of.map((e) => ({ alias: e.alias, file: e.filePath, scale: e.scale })),
    settings,
    outFile,
    name: alias,
  });
  try {
    addManifestEntry(manifest, { ...entry.data, filePath: outFile }, (listed) => listed.merge !== undefined);
  } catch (err) {
    if (!existed) rmSync(outFile, { force: true });
    throw err;
  }
  const how = [
    ...(settings.density === undefined ? [] : [`density ${settings.density}`]),
    ...(settings.seed === undefined ? [] : [`seed ${settings.seed}`]),
  ];
  process.stdout.write(
    `merged ${of.map((e) => e.alias).join(", ")} (weights ${settings.weights.join(", ")}) by ${settings.method}${how.length ? ` (${how.join(", ")})` : ""} into ${outFile} (rank ${result.rank}, ${result.targets} targets, ${result.type}, sha256 ${result.sha256}); "${alias}" ${replaced ? "replaced in" : "added to"} ${manifest}\n`,
  );
}

/**
 * The entries `--of` names, in its order, or by default every entry that is a capability of its own: not a merge,
 * not an activated LoRA (it applies from its invocation point only, so the `static` set leaves it out too).
 */
function mergedEntries(entries: readonly LibraryEntry[], list: string | undefined): LibraryEntry[] {
  const capabilities = entries.filter((e) => !e.merge);
  const chosen =
    list === undefined
      ? capabilities.filter((e) => !isActivated(e.filePath))
      : list.split(",").map((a) => {
          const alias = a.trim();
          const entry = capabilities.find((e) => e.alias === alias);
          if (!entry)
            throw new UsageError(
              `--of: "${alias}" is not ${entries.some((e) => e.alias === alias) ? "an adapter a merge takes (it is a merge itself)" : "an adapter of the library"}; the library's are ${capabilities.map((e) => e.alias).join(", ") || "(none)"}`,
            );
          return entry;
        });
  const twice = chosen.filter((e, i) => chosen.indexOf(e) !== i);
  if (twice.length) throw new UsageError(`--of: ${twice.map((e) => e.alias).join(", ")} named twice`);
  if (chosen.length < 2)
    throw new UsageError(
      `--of: a merge takes two adapters or more; ${chosen.length ? `only ${chosen[0]!.alias} is` : "none is"} given (one alone is single:<alias>)`,
    );
  return chosen;
}

/** A file whose header cannot be read is not decided here: the merge names it and why. */
function isActivated(file: string): boolean {
  try {
    return readGgufHeader(file).metadata.has(ALORA_INVOCATION_KEY);
  } catch {
    return false;
  }
}

/** The flags as merge settings with their defaults spelled out, each problem naming its flag and what it may be. */
function mergeSettings(flags: MergeFlags, of: readonly LibraryEntry[]): MergeSettings {
  const weights = flags.weights?.split(",").map((w) => (w.trim() === "" ? NaN : Number(w)));
  if (weights && weights.length !== of.length)
    throw new UsageError(
      `--weights: ${weights.length} weight(s) for ${of.length} adapters (${of.map((e) => e.alias).join(", ")}): one each, in that order`,
    );
  const parsed = MergeSettingsSchema.safeParse({
    method: flags.method,
    density: flags.density === undefined ? undefined : Number(flags.density),
    // 1 each: every adapter's full update, as the library serves it
    weights: weights ?? of.map(() => 1),
    seed: flags.seed,
  });
  if (!parsed.success) {
    const problem = ({ path, message }: { path: PropertyKey[]; message: string }) => {
      const flag = String(path[0]) as keyof MergeFlags;
      const given = flags[flag] === undefined ? "" : ` ${flags[flag]}`;
      return `--${flag}${given}${path.length > 1 ? ` (item ${Number(path[1]) + 1})` : ""}: ${message}`;
    };
    throw new UsageError(parsed.error.issues.map(problem).join("; "));
  }
  return effectiveSettings(parsed.data);
}
