import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { parsePeftConfig, type PeftConfig } from "./peftConfig.js";
import { PeftImportError } from "./errors.js";
import { PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE } from "./importPeft.js";

/**
 * Opens a file of a PEFT folder the manifest names, only if it is a regular file there: a symbolic link could
 * point outside the adapter folders (adapters.allowedDirs), and a FIFO or a device would hold the read forever.
 * O_NOFOLLOW refuses the link and O_NONBLOCK the wait in one step, so nothing can swap the file between a check
 * and the read.
 */
export async function openRegularFile(file: string): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const reason =
      code === "ELOOP"
        ? "is a symbolic link; give the folder that holds the file itself"
        : `cannot be opened (${(err as Error).message})`;
    throw new PeftImportError(file, undefined, reason);
  }
  const s = await handle.stat();
  if (!s.isFile()) {
    await handle.close();
    throw new PeftImportError(
      file,
      undefined,
      "is not a regular file (a FIFO, a device or a folder); give the folder's adapter files themselves",
    );
  }
  return handle;
}

/** The folder's config, parsed by the importer's rules, and its text as it is. */
export async function readPeftFolderConfig(
  dir: string,
): Promise<{ config: PeftConfig; raw: Record<string, unknown>; text: string }> {
  const file = join(dir, PEFT_CONFIG_FILE);
  const handle = await openRegularFile(file);
  let text: string;
  try {
    text = await handle.readFile("utf8");
  } finally {
    await handle.close();
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new PeftImportError(file, undefined, `cannot read it as JSON: ${(err as Error).message}`);
  }
  return { config: parsePeftConfig(raw, file), raw: raw as Record<string, unknown>, text };
}

/**
 * SHA-256 of what an engine loads from the folder: its config and its weights (the adapter's identity,
 * AdapterVersion.peftSha256).
 */
export async function peftFolderSha256(dir: string): Promise<string> {
  const { text } = await readPeftFolderConfig(dir);
  const weights = await openRegularFile(join(dir, PEFT_WEIGHTS_FILE));
  const hash = createHash("sha256");
  try {
    for await (const chunk of weights.createReadStream({ highWaterMark: 4 << 20, autoClose: false }))
      hash.update(chunk as Buffer);
  } finally {
    await weights.close();
  }
  return createHash("sha256")
    .update(`${PEFT_CONFIG_FILE}:${createHash("sha256").update(text).digest("hex")}\n`)
    .update(`${PEFT_WEIGHTS_FILE}:${hash.digest("hex")}\n`)
    .digest("hex");
}
