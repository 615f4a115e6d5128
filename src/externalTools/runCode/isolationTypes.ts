/* What an isolation level is and enforces: types shared by the detection (isolation.ts), the jail's command and the runner. */

/**
 * How strongly a snippet is contained.
 *
 * - `bubblewrap`: a bwrap jail (own mount, pid, network, ipc and uts namespaces). Only the interpreters'
 *   install dirs and system dirs are visible, read-only, minus the server's own files among them (`hidingPaths`); the
 * workdir is the only writable place; there is no
 *   network (an own, empty loopback); the whole process tree dies with the jail. Plus everything below.
 * - `rlimits`: no jail. prlimit limits (memory, CPU backstop, file size), a scrubbed environment, a temp
 *   workdir as cwd and a process-group kill. Reads and writes anywhere the server's user may, and the
 *   network, are NOT prevented.
 */
export type IsolationLevel = "bubblewrap" | "rlimits";

/** What a level actually prevents, as booleans a caller (or a tool result) can show. */
export interface Enforcement {
  /** Files outside the workdir are invisible (the interpreters' read-only install dirs aside). */
  filesystem: boolean;
  /** No network beyond an own, empty loopback. */
  network: boolean;
  /** RLIMIT_NPROC caps processes: only meaningful for a dedicated uid (root and CAP_SYS_RESOURCE ignore it). */
  processCount: boolean;
}

export interface Jail {
  bwrap: string;
  /** Host paths bound read-only at the same path (system dirs, interpreter installs, the limit tools). */
  readOnlyPaths: string[];
  /** Top-level symlinks recreated in the jail (merged /usr: /bin -> usr/bin, ...). */
  symlinks: Array<{ path: string; target: string }>;
  /**
   * Set when the server runs as root: the jail then skips the user namespace and setpriv switches to this
   * real, unprivileged uid/gid, so the snippet is not root and RLIMIT_NPROC counts only sandboxes.
   */
  dropPrivileges?: { setpriv: string; uid: number; gid: number };
  /**
   * Server paths that a bound folder would otherwise show (the config, tokens, traces, manifest, the package):
   * covered inside the jail by an empty tmpfs (folders) or /dev/null (files). See `hidingPaths`.
   */
  masks?: Array<{ path: string; kind: "dir" | "file" }>;
}

export interface IsolationInfo {
  level: IsolationLevel;
  /** Human readable: what is enforced, what is not, and why the level was chosen. */
  detail: string;
  /** Absolute interpreter paths verified to work at this level. */
  interpreters: { python?: string; javascript: string };
  enforces: Enforcement;
  prlimit: string;
  /** Present exactly at the bubblewrap level. */
  jail?: Jail;
}
