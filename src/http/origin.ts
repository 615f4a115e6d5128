/**
 * Whether a browser's `Origin` is this server's own page: http(s), one of the server's host names, and the very
 * host and port the request was sent to (its `Host`). The port matters: a page of another local web app on
 * `http://localhost:9999` is another origin, even though its host name is the server's.
 */
export function isOwnOrigin(
  origin: string | undefined,
  host: string | undefined,
  hostnames: readonly string[],
): boolean {
  if (origin === undefined || host === undefined) return false;
  let page: URL;
  let addressed: URL;
  try {
    page = new URL(origin);
    addressed = new URL(`${page.protocol}//${host}`);
  } catch {
    return false;
  }
  // parsing Host under the page's scheme drops the same default port (80 or 443) Origin leaves out
  return (
    (page.protocol === "http:" || page.protocol === "https:") &&
    hostnames.includes(page.hostname) &&
    page.host === addressed.host
  );
}
