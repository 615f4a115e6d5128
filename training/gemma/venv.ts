import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { Logger } from "../../src/log.js";
import { PYTHON_SOURCES } from "./library.js";

const REQUIREMENTS = join(PYTHON_SOURCES, "requirements.txt");

/**
 * The Python of the pipeline's own virtual environment, made from PyPI with the pinned requirements the first time
 * and cached outside the repository, keyed by the requirements' hash (a changed pin makes a new one): about 90 s and
 * 5.6 GB, torch's CUDA runtime wheels included (PyPI's Linux torch depends on them; download.pytorch.org's CPU
 * wheels are not reachable from every machine). The server itself never needs it.
 */
export function pipelinePython(logger: Logger): string {
  const key = createHash("sha256").update(readFileSync(REQUIREMENTS)).digest("hex").slice(0, 12);
  const root = join(process.env.WEACT_VENV_CACHE ?? join(homedir(), ".cache", "weact-mcp", "venv"), key);
  const python = join(root, "bin", "python");
  if (existsSync(join(root, ".complete"))) return python;
  logger.warn({ venv: root }, "making the training pipeline's Python environment (once; about 90 s and 5.6 GB)");
  // built beside its final place and renamed, so an interrupted install is never taken for a complete one
  const building = `${root}.building-${process.pid}`;
  rmSync(building, { recursive: true, force: true });
  execFileSync("python3", ["-m", "venv", building], { stdio: ["ignore", "inherit", "inherit"] });
  execFileSync(join(building, "bin", "python"), ["-m", "pip", "install", "-q", "-r", REQUIREMENTS], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  writeFileSync(join(building, ".complete"), `${new Date().toISOString()}\n`);
  rmSync(root, { recursive: true, force: true });
  renameSync(building, root);
  return python;
}
