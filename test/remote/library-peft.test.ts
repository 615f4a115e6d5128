import { copyFileSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RemoteEngine } from "../../src/engines/remote/index.js";
import { readGgufHeader } from "../../src/gguf/index.js";
import { LlamaChatCodec } from "../../src/llamaCpp/LlamaChatCodec.js";
import { adapterCopiesRoot } from "../../src/library/AdapterCopies.js";
import { AdapterLibrary } from "../../src/library/AdapterLibrary.js";
import { parseManifest } from "../../src/library/manifest.js";
import { exportPeft, peftFolderSha256 } from "../../src/library/peft/index.js";
import { createLogger } from "../../src/log.js";
import { PACKAGE_ROOT } from "../../src/paths.js";
import { demo, quietLogger } from "../helpers/engine.js";
import { tempDir } from "../helpers/files.js";

/*
 * A manifest's PEFT folder (what vLLM and SGLang load instead of the GGUF) is read like the GGUF: each file opened
 * inside the adapter folders, copied to the server's private folder, and the engine's form made from that copy. vLLM
 * cannot run here: a loopback server answers with the fixtures of test/fixtures/remote/vllm.json.
 */

const VLLM = JSON.parse(readFileSync(join(PACKAGE_ROOT, "test", "fixtures", "remote", "vllm.json"), "utf8")) as {
  responses: Record<string, unknown>;
};
const ENGINE_ADAPTER_DIR = "/srv/weact-adapters";

const lib = tempDir("weact-lib-");
const outside = tempDir("weact-outside-");
const localDir = tempDir("weact-peft-");
const tmp = tempDir("weact-tmp-");
const loads: { lora_name: string; lora_path: string }[] = [];
let fake: Server;
let engine: RemoteEngine;
let library: AdapterLibrary;
let savedTmp: string | undefined;

beforeAll(async () => {
  savedTmp = process.env.TMPDIR;
  process.env.TMPDIR = tmp;
  const codec = await LlamaChatCodec.load({ modelPath: demo.model, logger: quietLogger() });
  fake = createServer((req, res) => {
    let data = "";
    req.on("data", (d: Buffer) => (data += d.toString()));
    req.on("end", () => {
      const body = data ? (JSON.parse(data) as Record<string, unknown>) : {};
      const route = `${req.method} ${req.url}`;
      const answer =
        route === "GET /v1/models"
          ? VLLM.responses.models
          : route === "POST /tokenize"
            ? { tokens: codec.tokenize(body.prompt as string, true), count: 0, max_model_len: 8192 }
            : route === "POST /v1/load_lora_adapter"
              ? (loads.push(body as (typeof loads)[number]), VLLM.responses.load_ok)
              : route === "POST /v1/unload_lora_adapter"
                ? VLLM.responses.unload_ok
                : undefined;
      if (answer === undefined) res.writeHead(404).end(JSON.stringify({ detail: "Not Found" }));
      else res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((resolve) => fake.listen(0, "127.0.0.1", resolve));
  engine = await RemoteEngine.connect({
    url: `http://127.0.0.1:${(fake.address() as { port: number }).port}`,
    flavor: "vllm",
    adapterDir: ENGINE_ADAPTER_DIR,
    localAdapterDir: localDir,
    timeoutMs: 5000,
    maxInFlight: 4,
    codec,
    logger: quietLogger(),
  });

  copyFileSync(demo.adapters.write!, join(lib, "write.gguf"));
  const base = readGgufHeader(demo.model);
  await exportPeft({ adapter: readGgufHeader(demo.adapters.write!), base, outDir: join(lib, "write-peft"), scale: 1 });
  // a PEFT folder whose weights are a symlink out of the adapter folders, and a folder that is itself one
  await exportPeft({ adapter: readGgufHeader(demo.adapters.plan!), base, outDir: join(outside, "peft"), scale: 1 });
  mkdirSync(join(lib, "linked-peft"));
  copyFileSync(join(outside, "peft", "adapter_config.json"), join(lib, "linked-peft", "adapter_config.json"));
  symlinkSync(
    join(outside, "peft", "adapter_model.safetensors"),
    join(lib, "linked-peft", "adapter_model.safetensors"),
  );
  symlinkSync(join(outside, "peft"), join(lib, "outside-peft"));
  const manifest = join(lib, "manifest.json");
  const entries = [
    { alias: "write", description: "Writing.", file: "write.gguf", peft: "write-peft" },
    { alias: "linked", description: "A linked file.", file: "write.gguf", peft: "linked-peft" },
    { alias: "moved", description: "A linked folder.", file: "write.gguf", peft: "outside-peft" },
  ];
  writeFileSync(manifest, JSON.stringify({ adapters: entries }));
  library = await AdapterLibrary.load(engine, parseManifest({ adapters: entries }, manifest), createLogger("silent"), {
    manifestPath: manifest,
    allowedDirs: [lib],
  });
});
afterAll(async () => {
  await engine?.dispose();
  await new Promise((resolve) => fake?.close(resolve));
  if (savedTmp === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = savedTmp;
});

describe("a manifest's PEFT folder on a remote engine", () => {
  it("is loaded from the server's copy of its files: the engine's folder holds the manifest folder's bytes", async () => {
    const write = library.get("write")!;
    expect(write.error).toBeUndefined();
    expect(write.info!.peftSha256).toBe(await peftFolderSha256(join(lib, "write-peft")));
    expect(write.info!.filePath).toBe(join(lib, "write.gguf"));
    const load = loads.find((l) => l.lora_name.startsWith("write-"))!;
    const placed = join(localDir, load.lora_path.slice(ENGINE_ADAPTER_DIR.length + 1));
    for (const name of ["adapter_config.json", "adapter_model.safetensors"])
      expect(readFileSync(join(placed, name)).equals(readFileSync(join(lib, "write-peft", name))), name).toBe(true);
    // the PEFT copy went once the engine had its own form; the GGUF's stays while its version is served
    const copies = readdirSync(adapterCopiesRoot()).flatMap((d) => readdirSync(join(adapterCopiesRoot(), d)));
    expect(copies).toEqual([write.info!.sha256]);
  });

  it("refuses a PEFT file or folder that is a symlink out of the adapter folders, naming the field, with its code", () => {
    expect(library.get("linked")!.error).toMatch(
      /^peft: .*linked-peft\/adapter_model\.safetensors is outside the adapter folders .*\[adapter_outside\]$/,
    );
    expect(library.get("moved")!.error).toMatch(
      /^peft: .*outside-peft\/adapter_config\.json is outside the adapter folders .*\[adapter_outside\]$/,
    );
    expect(loads.map((l) => l.lora_name).filter((n) => /^(linked|moved)-/.test(n))).toEqual([]);
  });
});
