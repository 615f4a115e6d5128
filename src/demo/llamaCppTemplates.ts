import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The real chat templates, read from the llama.cpp source node-llama-cpp ships (its git bundle's
 * models/templates/*.jinja), never copied into this repository. Extracted once per bundle commit into
 * `cacheDir/<commit>/` (git-ignored) with the `git` command; later runs read the cache.
 */

export class TemplateSourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TemplateSourceError";
  }
}

export function llamaCppBundlePath(): string {
  // the package's entry point is dist/index.js; its exports do not include package.json
  const entry = fileURLToPath(import.meta.resolve("node-llama-cpp"));
  return join(dirname(dirname(entry)), "llama", "gitRelease.bundle");
}

function git(args: string[]): string {
  try {
    return execFileSync("git", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 << 20 });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === "ENOENT")
      throw new TemplateSourceError(
        "the family demo models read their chat templates from node-llama-cpp's llama.cpp bundle with `git`, which is not installed (apt-get install git)",
      );
    throw new TemplateSourceError(`git ${args[0]} failed: ${String(e.stderr ?? e.message).trim()}`);
  }
}

/** The bundle's commit, the cache key: a new node-llama-cpp brings new templates into a new folder. */
function bundleCommit(bundle: string): string {
  if (!existsSync(bundle)) throw new TemplateSourceError(`${bundle} is missing: reinstall node-llama-cpp (npm ci)`);
  const heads = git(["bundle", "list-heads", bundle]).split("\n");
  const commit = (heads.find((l) => /\sHEAD$/.test(l)) ?? heads[0]!).split(" ")[0]!;
  if (!/^[0-9a-f]{40}$/.test(commit)) throw new TemplateSourceError(`cannot read the commit of ${bundle}`);
  return commit;
}

/** The text of `models/templates/<file>` at the bundle's commit, byte for byte. */
export function llamaCppTemplates(
  files: readonly string[],
  cacheDir: string,
  bundle = llamaCppBundlePath(),
): Record<string, string> {
  const dir = join(cacheDir, bundleCommit(bundle));
  const missing = files.filter((f) => !existsSync(join(dir, f)));
  if (missing.length) {
    mkdirSync(cacheDir, { recursive: true });
    const repo = mkdtempSync(join(cacheDir, ".fetch-"));
    try {
      git(["init", "-q", "--bare", repo]);
      git(["--git-dir", repo, "fetch", "-q", bundle, "HEAD"]);
      const staging = mkdtempSync(join(cacheDir, ".staging-"));
      for (const f of missing)
        writeFileSync(join(staging, f), git(["--git-dir", repo, "show", `FETCH_HEAD:models/templates/${f}`]));
      mkdirSync(dir, { recursive: true });
      for (const f of missing) renameSync(join(staging, f), join(dir, f));
      rmSync(staging, { recursive: true, force: true });
    } finally {
      rmSync(repo, { recursive: true, force: true });
    }
  }
  return Object.fromEntries(files.map((f) => [f, readFileSync(join(dir, f), "utf8")]));
}
