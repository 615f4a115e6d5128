import { createModelDownloader } from "node-llama-cpp";

/** One file from Hugging Face through node-llama-cpp's downloader, failing within bounded time. */
export interface HfDownload {
  /** `hf:<user>/<repo>/<file-path>[#<branch>]`, the form node-llama-cpp resolves without an API call. */
  readonly uri: string;
  /** The Hugging Face endpoint, with its trailing slash (`https://huggingface.co/`, or a mirror). */
  readonly endpoint: string;
  /** The folder the file is written into, under `fileName`. */
  readonly dir: string;
  readonly fileName: string;
  /** How long the endpoint may take to answer the first request. */
  readonly answerTimeoutMs: number;
  /** How long the download may go without a byte before it is abandoned. */
  readonly stallTimeoutMs: number;
  readonly onProgress?: (downloaded: number, total: number) => void;
}

const HF_URI = /^hf:([^/]+)\/([^/]+)\/([^#]+)(?:#(.+))?$/;

/** The URL node-llama-cpp downloads an `hf:` file URI from (its `resolve/<branch>/` form). */
function fileUrl(uri: string, endpoint: string): string {
  const m = HF_URI.exec(uri);
  if (!m) throw new Error(`${uri} is not an hf:<user>/<repo>/<file-path> URI`);
  const [, user, repo, path, branch] = m;
  return `${endpoint}${user}/${repo}/resolve/${encodeURIComponent(branch ?? "main")}/${path}`;
}

/**
 * Asks the endpoint for the file before node-llama-cpp does: its downloader (ipull) retries a failed connection up
 * to 150 times with a backoff of up to 5 s, about 12 minutes, and its setup takes no abort signal, so an unreachable
 * host is found here in one request instead.
 */
async function checkReachable(url: string, timeoutMs: number): Promise<void> {
  const token = process.env.HF_TOKEN;
  let response: Response;
  try {
    response = await fetch(url, {
      method: "HEAD",
      headers: token ? { authorization: `Bearer ${token}` } : {},
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    const host = new URL(url).host;
    if ((err as Error).name === "TimeoutError")
      throw new Error(`${host} did not answer within ${timeoutMs / 1000} s`, { cause: err });
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(`${host} unreachable: ${cause?.message ?? cause?.code ?? (err as Error).message}`, { cause: err });
  }
  if (response.status === 401 || response.status === 403)
    throw new Error(`HTTP ${response.status} for ${url}: the repository needs an access token (set HF_TOKEN)`);
  if (!response.ok) throw new Error(`HTTP ${response.status} for ${url}`);
}

/** Downloads the file and returns its path; throws with a one-line reason when the endpoint cannot deliver it. */
export async function downloadHfFile(download: HfDownload): Promise<string> {
  const { uri, endpoint, dir, fileName, answerTimeoutMs, stallTimeoutMs, onProgress } = download;
  await checkReachable(fileUrl(uri, endpoint), answerTimeoutMs);
  let lastByteAt = Date.now();
  const stalled = new AbortController();
  const downloader = await createModelDownloader({
    modelUri: uri,
    dirPath: dir,
    fileName,
    endpoints: { huggingFace: endpoint },
    // the caller's folder is fresh: a partial file from an earlier run is never mistaken for the model
    skipExisting: false,
    onProgress: ({ downloadedSize, totalSize }) => {
      lastByteAt = Date.now();
      onProgress?.(downloadedSize, totalSize);
    },
  });
  const watchdog = setInterval(
    () => {
      if (Date.now() - lastByteAt > stallTimeoutMs)
        stalled.abort(new Error(`no data from ${endpoint} for ${stallTimeoutMs / 1000} s`));
    },
    Math.min(stallTimeoutMs, 5000),
  );
  try {
    // an abort cancels the download inside node-llama-cpp; what it leaves in `dir` is the caller's to remove
    return await downloader.download({ signal: stalled.signal });
  } finally {
    clearInterval(watchdog);
  }
}
