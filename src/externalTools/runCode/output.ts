/**
 * Keeps the first `maxBytes` of a stream and counts (but drops) the rest.
 *
 * The runner keeps draining a chatty child instead of killing it at the cap: the snippet still finishes (or
 * hits its wall-time limit) and its real exit status is reported, while memory stays bounded here.
 */
export class CappedOutput {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  private dropped = false;

  constructor(private readonly maxBytes: number) {}

  push(chunk: Buffer): void {
    const room = this.maxBytes - this.kept;
    if (chunk.length > room) this.dropped = true;
    if (room <= 0) return;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(part);
    this.kept += part.length;
  }

  get truncated(): boolean {
    return this.dropped;
  }

  /** The kept bytes as UTF-8 (a character cut at the cap becomes U+FFFD), with a marker if any were dropped. */
  text(): string {
    const text = Buffer.concat(this.chunks, this.kept).toString("utf8");
    return this.dropped ? `${text}\n[... output truncated at ${this.maxBytes} bytes ...]` : text;
  }
}
