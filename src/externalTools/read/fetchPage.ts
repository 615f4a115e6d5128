import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { isPrivateAddress } from "./addressPolicy.js";

export interface FetchPolicy {
  maxBytes: number;
  timeoutMs: number;
  allowPrivateAddresses: boolean;
  maxRedirects: number;
  /** Which addresses count as private (default: isPrivateAddress); applied to every hop, literal or resolved. */
  isPrivate?: (address: string) => boolean;
}

/** The page was not fetched on purpose (scheme, address, size, type): the reason is for the caller. */
export class ReadRefusedError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "ReadRefusedError";
  }
}

export interface FetchedPage {
  url: string;
  contentType: string;
  body: string;
}

/**
 * Checks every address a hostname resolves to at connect time, so a DNS answer cannot swap a public
 * address for a private one between the check and the connection (rebinding).
 */
function guardedLookup(allowPrivate: boolean, isPrivate: (address: string) => boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, "", 0);
      const list = addresses as LookupAddress[];
      const bad = list.find((a) => !allowPrivate && isPrivate(a.address));
      if (bad)
        return callback(
          new ReadRefusedError(
            `${hostname} resolves to ${bad.address}, a private or loopback address (set tools.read.allowPrivateAddresses to allow)`,
          ),
          "",
          0,
        );
      if ((options as { all?: boolean }).all)
        return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  };
}

function get(url: URL, policy: FetchPolicy, signal: AbortSignal): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = request(
      url,
      {
        method: "GET",
        headers: {
          accept: "text/html,text/plain,text/markdown,application/json;q=0.9,*/*;q=0.1",
          "accept-encoding": "identity",
          "user-agent": "weact-mcp/0.1 (read tool)",
        },
        lookup: guardedLookup(policy.allowPrivateAddresses, policy.isPrivate ?? isPrivateAddress),
        signal,
      },
      resolve,
    );
    req.once("error", reject);
    req.end();
  });
}

async function readBody(res: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(res.headers["content-length"] ?? NaN);
  if (declared > maxBytes) {
    res.destroy();
    throw new ReadRefusedError(`the body is ${declared} bytes, over the ${maxBytes}-byte limit`);
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of res) {
    total += (chunk as Buffer).length;
    if (total > maxBytes) {
      res.destroy();
      throw new ReadRefusedError(`the body exceeds the ${maxBytes}-byte limit`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** Fetches an http(s) page within the policy: scheme, addresses (each redirect re-checked), time and size. */
export async function fetchPage(raw: string, policy: FetchPolicy, outer?: AbortSignal): Promise<FetchedPage> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ReadRefusedError(`"${raw.slice(0, 200)}" is neither a document id nor a URL`);
  }
  const signal = outer
    ? AbortSignal.any([outer, AbortSignal.timeout(policy.timeoutMs)])
    : AbortSignal.timeout(policy.timeoutMs);
  for (let hop = 0; hop <= policy.maxRedirects; hop++) {
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new ReadRefusedError(`only http and https URLs are read, not ${url.protocol}`);
    const literal = url.hostname.replace(/^\[|\]$/g, "");
    if (isIP(literal) && !policy.allowPrivateAddresses && (policy.isPrivate ?? isPrivateAddress)(literal)) {
      throw new ReadRefusedError(
        `${literal} is a private or loopback address (set tools.read.allowPrivateAddresses to allow)`,
      );
    }
    let res: IncomingMessage;
    try {
      res = await get(url, policy, signal);
    } catch (err) {
      if (err instanceof ReadRefusedError) throw err;
      if ((err as Error).name === "TimeoutError" || (err as Error).name === "AbortError")
        throw new ReadRefusedError(`${url.origin} did not answer within ${policy.timeoutMs} ms`);
      throw new ReadRefusedError(`cannot fetch ${url.href}: ${(err as Error).message}`);
    }
    const status = res.statusCode ?? 0;
    if (status >= 300 && status < 400 && res.headers.location) {
      res.resume();
      url = new URL(res.headers.location, url);
      continue;
    }
    if (status >= 400) {
      res.resume();
      throw new ReadRefusedError(`${url.href} answered HTTP ${status}`);
    }
    const contentType = String(res.headers["content-type"] ?? "application/octet-stream");
    if (!/^(text\/|application\/(json|xhtml\+xml|xml))/i.test(contentType)) {
      res.destroy();
      throw new ReadRefusedError(`${url.href} is ${contentType}, not a text document`);
    }
    const body = await readBody(res, policy.maxBytes);
    return { url: url.href, contentType, body: body.toString("utf8") };
  }
  throw new ReadRefusedError(`more than ${policy.maxRedirects} redirects`);
}
