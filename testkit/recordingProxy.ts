import { createServer, type Server } from "node:http";
import { Readable } from "node:stream";

/** One request the proxy passed on: its route, JSON body and when it started and ended (performance.now()). */
export interface RecordedRequest {
  route: string;
  body: Record<string, unknown>;
  startMs: number;
  endMs: number;
  status: number;
}

export interface RecordingProxy {
  readonly url: string;
  readonly recorded: readonly RecordedRequest[];
  stop(): Promise<void>;
}

/**
 * A loopback HTTP proxy in front of a serving engine that records every POST it passes on (answers streamed through
 * as they come): the token streams a weact-mcp server sends, for the benchmark to replay straight to the engine.
 */
export async function startRecordingProxy(target: string): Promise<RecordingProxy> {
  const recorded: RecordedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (d: Buffer) => chunks.push(d));
    req.on("end", () => {
      const startMs = performance.now();
      const raw = Buffer.concat(chunks);
      const route = `${req.method} ${req.url}`;
      void fetch(`${target}${req.url}`, {
        method: req.method,
        headers: { "content-type": req.headers["content-type"] ?? "application/json" },
        body: req.method === "GET" || req.method === "HEAD" ? undefined : raw,
      })
        .then(async (answer) => {
          res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "application/json" });
          if (answer.body) {
            const piped = Readable.fromWeb(answer.body as never).pipe(res);
            await new Promise((resolve) => piped.on("finish", resolve));
          } else res.end();
          if (req.method === "POST")
            recorded.push({
              route,
              body: JSON.parse(raw.toString("utf8") || "{}") as Record<string, unknown>,
              startMs,
              endMs: performance.now(),
              status: answer.status,
            });
        })
        .catch((err: unknown) => {
          res.writeHead(502).end(String(err));
        });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    recorded,
    stop: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
