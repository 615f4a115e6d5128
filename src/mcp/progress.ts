import type { McpCall } from "./host.js";

/** Longest silence of a long call that asked for progress: under the 5 s a client may reset its timeout on. */
export const HEARTBEAT_MS = 4000;

/**
 * Progress notifications for one long call (when the client sent a progressToken): each report, and a
 * heartbeat repeating the latest one at least every HEARTBEAT_MS whatever the phase (queued behind other
 * sessions, prefill or rebuild, decode), so a client with `resetTimeoutOnProgress` never times out a call
 * that is still working. `run` stops the heartbeat when the work ends.
 */
export function progressFor(extra: McpCall, first: string) {
  const token = extra._meta?.progressToken;
  let progress = 0;
  let message = first;
  const send = () => {
    if (token !== undefined)
      void extra
        .sendNotification({
          method: "notifications/progress",
          params: { progressToken: token, progress: ++progress, message },
        })
        .catch(() => undefined);
  };
  return {
    /** A new step: sent at once, and repeated by the heartbeat until the next one. */
    report(next: string): void {
      message = next;
      send();
    },
    async run<T>(work: () => Promise<T>): Promise<T> {
      if (token === undefined) return work();
      send();
      const timer = setInterval(send, HEARTBEAT_MS);
      try {
        return await work();
      } finally {
        clearInterval(timer);
      }
    },
  };
}
