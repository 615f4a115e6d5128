import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync, readSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Which native binding of node-llama-cpp the engine loads (model.binding):
 * - "prebuilt": the binary node-llama-cpp's npm packages ship (portable CPU variants, ggml's own thread pool);
 * - "source": the one scripts/node-llama-cpp-build.sh built on this machine from the same llama.cpp, for this CPU
 *   (GGML_NATIVE) with OpenMP, cached outside the repository; missing, it is an error that says how to build it;
 * - "auto": the source build when this machine has one that loads, else the prebuilt (with an info line).
 */
export type BindingSetting = "prebuilt" | "source" | "auto";

/** The one command that builds the source binding (scripts/node-llama-cpp-build.sh). */
export const BINDING_BUILD_COMMAND = "npm run build:llama-native";

/** The CMake options the build adds to node-llama-cpp's own (its key covers them). */
export const SOURCE_BINDING_OPTIONS = "GGML_NATIVE=ON GGML_OPENMP=ON";

/**
 * The compiler flags it adds (its key covers them too): no AMX, since a VM that lists AMX in its CPU flags without
 * letting a process use the tiles dies on ggml's first AMX kernel with an illegal instruction.
 */
export const SOURCE_BINDING_CFLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";

/**
 * The source binding was asked for (model.binding "source") and cannot be used; or, under "auto", it failed after
 * its libraries were loaded, when the prebuilt binding can no longer load in this process.
 */
export class BindingUnavailableError extends Error {
  constructor(reason: string, setting: BindingSetting = "source") {
    super(
      `model.binding is "${setting}", but ${reason}. Build it once with \`${BINDING_BUILD_COMMAND}\` ` +
        `(scripts/node-llama-cpp-build.sh; about 7 minutes on 2 cores), or set model.binding to "prebuilt"`,
    );
    this.name = "BindingUnavailableError";
  }
}

/** node-llama-cpp's package folder (its entry point is dist/index.js; its exports do not include package.json). */
export function nodeLlamaCppRoot(): string {
  return dirname(dirname(fileURLToPath(import.meta.resolve("node-llama-cpp"))));
}

/** The commit `git bundle list-heads` names HEAD (else the first head), read from the bundle's text header. */
export function bundleHead(bundle: string): string {
  const fd = openSync(bundle, "r");
  let header: string;
  try {
    const buf = Buffer.alloc(64 * 1024);
    header = buf.subarray(0, readSync(fd, buf, 0, buf.length, 0)).toString("latin1");
  } finally {
    closeSync(fd);
  }
  const lines = header.slice(0, header.indexOf("\n\n") >>> 0).split("\n");
  const heads = lines.map((l) => /^([0-9a-f]{40,64}) (\S+)$/.exec(l)).filter((m) => m !== null);
  const head = heads.find((m) => m[2] === "HEAD") ?? heads[0];
  if (!head) throw new Error(`${bundle}: no heads in the git bundle's header`);
  return head[1]!;
}

/** The CPU the build is for: its model name and flags (the key of a GGML_NATIVE build). */
export function cpuSignature(cpuinfo = "/proc/cpuinfo"): string {
  if (!existsSync(cpuinfo)) return "unknown";
  const text = readFileSync(cpuinfo, "utf8");
  const field = (name: string) => new RegExp(`^${name}\\s*: (.*)$`, "m").exec(text)?.[1] ?? "";
  return `${field("model name")}; ${field("flags")}`;
}

/**
 * The source binding's folder: `<cache>/<node-llama-cpp version>-<llama.cpp commit>-<hash>`, the hash over the
 * version, the commit, the build options, the platform and the CPU. scripts/node-llama-cpp-build.sh builds the same
 * text into the same key (a unit test holds the two together).
 */
export function sourceBindingDir(env: NodeJS.ProcessEnv = process.env): { dir: string; manifest: string } {
  const root = nodeLlamaCppRoot();
  const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;
  const commit = bundleHead(join(root, "llama", "gitRelease.bundle"));
  const manifest =
    `node-llama-cpp ${version}\n` +
    `llama.cpp ${commit}\n` +
    `options ${SOURCE_BINDING_OPTIONS}\n` +
    `cflags ${SOURCE_BINDING_CFLAGS}\n` +
    `platform ${process.platform}-${process.arch}\n` +
    `cpu ${cpuSignature()}\n`;
  const hash = createHash("sha256").update(manifest).digest("hex").slice(0, 12);
  const cache =
    env.WEACT_NODE_LLAMA_CPP_CACHE ||
    join(env.XDG_CACHE_HOME || join(env.HOME || homedir(), ".cache"), "weact-mcp", "node-llama-cpp");
  return { dir: join(cache, `${version}-${commit.slice(0, 12)}-${hash}`), manifest };
}

/** The built binding in `dir`, when the build finished (the folder appears only by a rename at its end). */
export function sourceBindingFile(dir: string): string | undefined {
  const file = join(dir, "llama-addon.node");
  return existsSync(file) && existsSync(join(dir, "_nlcBuildMetadata.json")) ? file : undefined;
}
