import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * Whether an executable `bwrap` is on PATH, decided here independently of the code under test: where it is, the
 * tests require the bubblewrap level (a broken detection must fail them, not quietly test the weaker level).
 */
export function bwrapOnPath(path = process.env.PATH ?? ""): boolean {
  return path
    .split(delimiter)
    .filter(Boolean)
    .some((dir) => {
      try {
        accessSync(join(dir, "bwrap"), constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
}

/** A CI run: CI set to anything but "false" or "0" (.ci/run sets CI=true, as CI services do). */
export function inCi(env: NodeJS.ProcessEnv = process.env): boolean {
  const ci = env.CI?.trim().toLowerCase();
  return Boolean(ci) && ci !== "false" && ci !== "0";
}

/** Why a test of the bubblewrap jail is skipped on a machine without it (a local run only: CI fails instead). */
export const NO_BWRAP = "bwrap is not on PATH, so the bubblewrap jail is not tested here (install bubblewrap)";

/**
 * Whether the tests of the bubblewrap jail can run here: bwrap is on PATH. Where it is not, a local run gets false
 * (the test skips, giving NO_BWRAP as its reason), but a CI run throws: a CI machine without bubblewrap would otherwise
 * pass every isolation test without ever starting the jail.
 */
export function jailTestable(env: NodeJS.ProcessEnv = process.env): boolean {
  if (bwrapOnPath(env.PATH)) return true;
  if (inCi(env))
    throw new Error(
      `CI=${env.CI} but bwrap is not on PATH: in CI the isolation tests must run the bubblewrap jail, not skip it; install bubblewrap (.ci/run installs it with apt-get)`,
    );
  return false;
}
