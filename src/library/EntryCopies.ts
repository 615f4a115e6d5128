import { join, resolve } from "node:path";
import type { AdapterSpec } from "../engine/index.js";
import { sha256Of } from "../gguf/index.js";
import { AdapterCopies, type AdapterCopy } from "./AdapterCopies.js";
import { openInside, type ConfinedFile } from "./confine.js";
import { AdapterPathError } from "./errors.js";
import type { LibraryEntry } from "./manifest.js";
import { PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE } from "./peft/index.js";

/** What the engine loads for an entry: the server's private copies of its files (AdapterCopies). */
interface CopiedSpec {
  spec: AdapterSpec;
  file: AdapterCopy;
  peft?: AdapterCopy;
}

/**
 * A library entry's files as the engine gets them: each read from the descriptor the folder check opened
 * (`openInside`) into the server's private copies, so the bytes checked, hashed and loaded are one and the same, and no
 * file swapped in after the check is ever read.
 */
export class EntryCopies {
  private readonly copies = new AdapterCopies();

  constructor(
    /** The folders adapter files may come from (adapters.allowedDirs). */
    private readonly allowedDirs: readonly string[],
    /** The manifest's folder: an entry's PEFT folder is relative to it. */
    private readonly manifestDir: string,
  ) {}

  /**
   * Gives `load` (an engine's add or refresh) the entry's copies. Its errors name the entry's own file and folder, where
   * the user can act; the PEFT copy is removed after (the engine keeps its own form of it), the GGUF copy stays while a
   * version uses it (`keepOnly`).
   */
  async load<T>(entry: LibraryEntry, load: (spec: AdapterSpec) => Promise<T>): Promise<T> {
    const copied = await this.copiesOf(entry);
    try {
      return await load(copied.spec);
    } catch (err) {
      throw this.inEntryTerms(err, copied, entry);
    } finally {
      if (copied.peft) await this.copies.remove(copied.peft);
    }
  }

  /** Whether the entry's file holds other bytes than `sha256` (read through the same confined open). */
  async fileChanged(entry: LibraryEntry, sha256: string): Promise<boolean> {
    let file: ConfinedFile;
    try {
      file = await openInside(entry.filePath, this.allowedDirs, "file");
    } catch (err) {
      // a file gone leaves the running version as it is; one refused now is refreshed, so the refusal is reported
      return !(err instanceof AdapterPathError && err.code === "adapter_missing");
    }
    try {
      return (await sha256Of(file.handle, file.size)) !== sha256;
    } finally {
      await file.handle.close();
    }
  }

  /** Removes the GGUF copies whose hash is not in `used`. */
  keepOnly(used: ReadonlySet<string>): Promise<void> {
    return this.copies.keepOnly(used);
  }

  private async copiesOf(entry: LibraryEntry): Promise<CopiedSpec> {
    const file = await this.copyGguf(entry.filePath);
    const peft = entry.peft === undefined ? undefined : await this.copyPeft(this.peftDir(entry));
    return {
      spec: { alias: entry.alias, filePath: file.path, scale: entry.scale, peftDir: peft?.path },
      file,
      ...(peft ? { peft } : {}),
    };
  }

  private peftDir(entry: LibraryEntry): string {
    return resolve(this.manifestDir, entry.peft!);
  }

  private async copyGguf(filePath: string): Promise<AdapterCopy> {
    const file = await openInside(filePath, this.allowedDirs, "file");
    try {
      // before copying: a file that is no GGUF is refused without its bytes in the message
      const magic = Buffer.alloc(4);
      const { bytesRead } = await file.handle.read(magic, 0, 4, 0);
      if (bytesRead < 4 || magic.toString("latin1") !== "GGUF")
        throw new AdapterPathError(
          "adapter_not_gguf",
          "file",
          file.path,
          'is not a GGUF file (it does not begin with "GGUF")',
          "give a GGUF LoRA; `weact-mcp import-peft` converts a PEFT folder",
        );
      return await this.copies.copy(file, "file");
    } finally {
      await file.handle.close();
    }
  }

  private async copyPeft(dir: string): Promise<AdapterCopy> {
    const files: { name: string; file: ConfinedFile }[] = [];
    try {
      for (const name of [PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE])
        files.push({ name, file: await openInside(join(dir, name), this.allowedDirs, "peft") });
      return await this.copies.copyFolder(files, "peft");
    } finally {
      for (const { file } of files) await file.handle.close();
    }
  }

  /** An engine's error about a copy, naming the entry's file and folder instead. */
  private inEntryTerms(err: unknown, copied: CopiedSpec, entry: LibraryEntry): unknown {
    if (!(err instanceof Error)) return err;
    err.message = err.message.split(copied.file.path).join(entry.filePath);
    if (copied.peft) err.message = err.message.split(copied.peft.path).join(this.peftDir(entry));
    return err;
  }
}
