/** Whether a process of this machine still runs: the owner check of pid-named locks and leftovers. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
