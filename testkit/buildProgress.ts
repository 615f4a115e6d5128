import { spawn } from "node:child_process";

/**
 * Progress of a long build (llama.cpp's, about 20 minutes cold on 2 cores) for the person waiting at the terminal:
 * one line every so often with the build's latest step and percentage, instead of its thousands of log lines or,
 * as before, nothing at all for half an hour.
 */
export class BuildProgress {
  private percent: number | undefined;
  private step: string | undefined;
  private partial = "";

  constructor(
    private readonly label: string,
    private readonly startedMs: number,
  ) {}

  /** Reads a chunk of the build's log (lines may be split across chunks). */
  feed(chunk: string): void {
    const lines = (this.partial + chunk).split(/\r?\n/);
    this.partial = lines.pop() ?? "";
    for (const line of lines) this.read(line);
  }

  /** The status line at `nowMs`: where the build is and for how long it has run. */
  line(nowMs: number): string {
    const at = [this.percent === undefined ? undefined : `${this.percent}%`, this.step].filter(Boolean).join(" ");
    return `${this.label}: ${at || "starting"} (${elapsed(nowMs - this.startedMs)})\n`;
  }

  /** The closing line of a build that ran. */
  done(nowMs: number): string {
    return `${this.label}: done in ${elapsed(nowMs - this.startedMs)}\n`;
  }

  private read(raw: string): void {
    const line = raw.trim();
    if (!line) return;
    // make: "[ 45%] Building CXX object ..."; ninja: "[123/456] Building CXX object ..."
    const make = /^\[\s*(\d{1,3})%\]\s*(.*)$/.exec(line);
    const ninja = /^\[(\d+)\/(\d+)\]\s*(.*)$/.exec(line);
    if (make) {
      this.percent = Number(make[1]);
      this.step = make[2];
    } else if (ninja) {
      this.percent = Math.floor((100 * Number(ninja[1])) / Math.max(1, Number(ninja[2])));
      this.step = ninja[3];
    } else this.step = line; // cmake's configure steps ("-- Detecting CXX compiler ABI info"), the script's own lines
  }
}

function elapsed(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Between two status lines: often enough to show the build is alive, rarely enough not to flood the terminal. */
export const PROGRESS_EVERY_MS = 30_000;

export interface ProgressOptions {
  /** Names the build in every line. */
  label: string;
  /** Said once, when the build first logs anything (a cached build logs nothing and prints nothing). */
  intro: string;
  /** Between two status lines (default PROGRESS_EVERY_MS). */
  everyMs?: number;
  /** Where the lines go (default: this process's stderr, the terminal `npm test` runs in). */
  write?: (text: string) => void;
  timeoutMs?: number;
}

/**
 * Runs a build command, returning its stdout; its stderr log becomes an intro line and a status line every
 * `everyMs` while it runs. A failed build throws with the end of its log.
 */
export function runWithProgress(command: string, args: readonly string[], opts: ProgressOptions): Promise<string> {
  const write = opts.write ?? ((text: string) => void process.stderr.write(text));
  const everyMs = opts.everyMs ?? PROGRESS_EVERY_MS;
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], timeout: opts.timeoutMs });
    const progress = new BuildProgress(opts.label, Date.now());
    let stdout = "";
    let log = "";
    let timer: NodeJS.Timeout | undefined;
    child.stdout.on("data", (d: Buffer) => void (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => {
      const text = d.toString();
      log = (log + text).slice(-8000);
      progress.feed(text);
      if (timer) return;
      write(opts.intro.endsWith("\n") ? opts.intro : `${opts.intro}\n`);
      timer = setInterval(() => write(progress.line(Date.now())), everyMs);
    });
    child.once("error", (err) => {
      clearInterval(timer);
      reject(err);
    });
    child.once("close", (code, signal) => {
      clearInterval(timer);
      if (timer && code === 0) write(progress.done(Date.now()));
      if (code === 0) resolve(stdout);
      else reject(new Error(`${command} ${args.join(" ")} failed (${code ?? signal}):\n${log.slice(-4000)}`));
    });
  });
}
