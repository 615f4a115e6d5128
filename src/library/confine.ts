import { existsSync, realpathSync } from "node:fs";
import { resolve, sep } from "node:path";

/**
 * The file is one of the folders or inside one, after resolving `..` and symlinks (of the file and of the
 * folders, where they exist): a path cannot escape by a `..` segment, a symlink, or a sibling folder that
 * only shares a prefix ("/lib" does not contain "/library/x").
 */
export function isInsideDirs(filePath: string, dirs: readonly string[]): boolean {
  const real = existsSync(filePath) ? realpathSync(filePath) : resolve(filePath);
  return dirs.some((dir) => {
    const root = existsSync(dir) ? realpathSync(dir) : resolve(dir);
    return real === root || real.startsWith(root + sep);
  });
}
