import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { TRAINER_SOURCES } from "./paths.js";

/** weact-train's binary, built first through the cached llama.cpp build (seconds, once the static ggml exists). */
export function trainerBinary(): string {
  const dir = execFileSync(
    "bash",
    [join(PACKAGE_ROOT, "scripts", "llama-cpp-build.sh"), "--program", TRAINER_SOURCES],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
  )
    .trim()
    .split("\n")
    .at(-1)!;
  return join(dir, "weact-train");
}
