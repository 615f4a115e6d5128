import { randomBytes, createHash } from "node:crypto";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { join, posix } from "node:path";
import type { AdapterInfo } from "../../../engine/index.js";
import { sha256File, type GgufFile } from "../../../gguf/index.js";
import { exportPeft, PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE, scaledPeftCopy } from "../../../library/peft/index.js";

/** Where PEFT folders go: as this server writes them, and the same folder as the engine reads it. */
export interface PeftDirs {
  local: string;
  engine: string;
}

/**
 * The name an engine serves a version under: alias, a short hash of the exact PEFT files it loads (the scale is
 * baked into them) and the scale, e.g. `search-3f2a9c01b7d4-s1`. A refreshed adapter is a new name, so an engine
 * whose caches are keyed by adapter name can never serve a cache computed under the old weights.
 */
function versionedName(alias: string, contentHash: string, scale: number): string {
  return `${alias}-${contentHash.slice(0, 12)}-s${scale}`;
}

/**
 * Puts a version's PEFT form under the adapter folder: the manifest's PEFT folder, or one exported from the GGUF,
 * with a scale other than 1 baked into lora_alpha (vLLM and SGLang take no per-request scale). Folders are
 * content-addressed: written once under a temporary name, then renamed to their versioned name (an existing one
 * holds the same bytes and is kept).
 */
export async function placePeft(
  info: AdapterInfo,
  header: GgufFile,
  base: GgufFile,
  peftDir: string | undefined,
  dirs: PeftDirs,
  baseModel: string,
): Promise<{ name: string; enginePath: string }> {
  await mkdir(dirs.local, { recursive: true });
  const tmp = join(dirs.local, `.tmp-${info.alias}-${process.pid}-${randomBytes(4).toString("hex")}`);
  try {
    if (peftDir) await scaledPeftCopy(peftDir, tmp, info.scale);
    else await exportPeft({ adapter: header, base, outDir: tmp, scale: info.scale, baseModel });
    const hash = createHash("sha256")
      .update(await sha256File(join(tmp, PEFT_CONFIG_FILE)))
      .update(await sha256File(join(tmp, PEFT_WEIGHTS_FILE)))
      .digest("hex");
    const name = versionedName(info.alias, hash, info.scale);
    const placed = join(dirs.local, name);
    // a folder of that name holds these very bytes (content-addressed): keep it
    if (await stat(placed).catch(() => undefined)) await rm(tmp, { recursive: true, force: true });
    else await rename(tmp, placed);
    return { name, enginePath: posix.join(dirs.engine, name) };
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}
