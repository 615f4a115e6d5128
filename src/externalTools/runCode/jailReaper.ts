import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Ends privilege-dropping jails that outlive the server.
 *
 * As root the jail has no user namespace and the snippet is the pid namespace's init under a real unprivileged
 * uid. The outer bwrap has dropped every capability by then, so the kernel refuses it the right to signal that
 * uid: no parent-death signal (bwrap's --die-with-parent, setpriv's --pdeathsig) ever reaches the snippet, and
 * an exit handler does not run on SIGKILL. So a small watcher process, started once, is told of every such run
 * over a pipe; when the pipe closes without the run being withdrawn (the server died, however it died), the
 * watcher, still root with its capabilities, kills the jail's init and removes the workdir.
 */
export class JailReaper {
  private watcher: ChildProcess | undefined;

  track(bwrapPid: number, workdir: string): void {
    this.send(`+${bwrapPid} ${workdir}`);
  }

  release(bwrapPid: number): void {
    this.send(`-${bwrapPid}`);
  }

  private send(line: string): void {
    this.watcher ??= startWatcher();
    this.watcher.stdin?.write(`${line}\n`);
  }
}

function startWatcher(): ChildProcess {
  const main = fileURLToPath(new URL("./jailReaperMain.js", import.meta.url));
  // its own session, so a signal to the server's process group does not take the watcher with it
  const watcher = spawn(process.execPath, [main], { detached: true, stdio: ["pipe", "ignore", "ignore"], env: {} });
  watcher.unref();
  (watcher.stdin as unknown as { unref?: () => void }).unref?.();
  watcher.stdin?.on("error", () => undefined);
  return watcher;
}
