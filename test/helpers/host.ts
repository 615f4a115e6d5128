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
