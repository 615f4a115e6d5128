import { execFileSync } from "node:child_process";
import { join } from "node:path";
import type { Logger } from "../../src/log.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { PYTHON_SOURCES } from "./library.js";

/**
 * The Python of the pipeline's own virtual environment (scripts/python-env.sh: made from PyPI with the pinned
 * requirements the first time, cached outside the repository by their hash): about 90 s and 5.6 GB the first
 * time, torch's CUDA runtime wheels included (PyPI's Linux torch depends on them; download.pytorch.org's CPU
 * wheels are not reachable from every machine). The server itself never needs it.
 */
export function pipelinePython(logger: Logger): string {
  logger.info("the training pipeline's Python environment (made once per machine: about 90 s and 5.6 GB)");
  const out = execFileSync(
    "bash",
    [join(PACKAGE_ROOT, "scripts", "python-env.sh"), join(PYTHON_SOURCES, "requirements.txt")],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
  );
  return out.trim().split("\n").at(-1)!;
}
