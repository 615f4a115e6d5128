import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { chromium, type BrowserContext } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/files.js";
import {
  call,
  connectClient,
  startHttpServer,
  testConfig,
  type Connected,
  type HttpServer,
} from "../helpers/server.js";

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef00";
const dir = tempDir();
const tokenFile = join(dir, "tokens");
writeFileSync(tokenFile, `alice:${ALICE}\nbob:${BOB}\n`);
const ADMIN = "root-token-0123456789abcdef0";
const adminFile = join(dir, "admin");
writeFileSync(adminFile, `root:${ADMIN}\n`);
/** Debian's chromium (.ci/run installs it); override with WEACT_CHROMIUM. */
const CHROMIUM = process.env.WEACT_CHROMIUM ?? "/usr/bin/chromium";
/** Where the screenshots for the note go (default: a temporary folder; the path is logged). */
const SHOTS = process.env.WEACT_SCREENSHOT_DIR ?? dir;
const XSS = "<img src=x onerror=alert(1)>";
const settings = {
  harness: { maxTokensPerTurn: 96, workflow: ["plan", "write"], stage: { turns: 1 }, traceDir: join(dir, "traces") },
  openai: { continuationSeconds: 2 },
};

let server: HttpServer;
let alice: Connected;
let bob: Connected;
let browser: BrowserContext;
beforeAll(async () => {
  server = await startHttpServer(
    ["--token-file", tokenFile],
    testConfig({ ...settings, server: { adminTokenFile: adminFile, maxStatusLoginsPerClient: 2, maxStatusLogins: 4 } }),
  );
  [alice, bob] = await Promise.all([
    connectClient("http", server, { authorization: `Bearer ${ALICE}` }),
    connectClient("http", server, { authorization: `Bearer ${BOB}` }),
  ]);
  // a fresh, empty profile; without the background-networking flags Chromium's own connections are refused on a closed
  // network
  browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "weact-chromium-")), {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});
afterAll(async () => {
  await browser?.close();
  await Promise.all([alice?.close(), bob?.close()]);
  await server?.stop();
});

const statusJson = async (token: string) =>
  (await fetch(`${server.url}/status.json`, { headers: { authorization: `Bearer ${token}` } })).json() as Promise<{
    suspended_runs: number;
    sessions: { mine: { id: string }[] };
    runs: { mine: { trace_id: string; state: string }[] };
  }>;

describe("status page", { timeout: 120_000 }, () => {
  it("the login form needs this server's Origin and sets an HttpOnly, SameSite=Strict cookie; /status.json needs a token or that cookie", async () => {
    const post = (headers: Record<string, string>, token = ALICE) =>
      fetch(`${server.url}/status/login`, {
        method: "POST",
        redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
        body: `token=${token}`,
      });
    expect((await post({ origin: "http://evil.example" })).status).toBe(403);
    // the same host name on another port is another site (login CSRF from any other local web app)
    expect((await post({ origin: "http://localhost:9999" })).status).toBe(403);
    expect((await post({ origin: `http://localhost:${Number(new URL(server.url).port) + 1}` })).status).toBe(403);
    expect((await post({})).status).toBe(403);
    expect((await post({ origin: server.url }, "wrong-token-0000000000000")).status).toBe(401);
    const ok = await post({ origin: server.url });
    expect(ok.status).toBe(303);
    const cookie = ok.headers.get("set-cookie")!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Strict/);
    expect(cookie).not.toContain(ALICE);
    expect((await fetch(`${server.url}/status.json`)).status).toBe(401);
    expect((await fetch(`${server.url}/status.json`, { headers: { cookie: cookie.split(";")[0]! } })).status).toBe(200);
    expect((await fetch(`${server.url}/status`)).headers.get("content-security-policy")).toMatch(/default-src 'self'/);
  });

  it("logging out ends the login on the server and clears the cookie; logins are capped per token (its oldest ends) and in all (429)", async () => {
    const login = async (token: string) => {
      const res = await fetch(`${server.url}/status/login`, {
        method: "POST",
        redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded", origin: server.url },
        body: `token=${token}`,
      });
      return { status: res.status, text: await res.text(), cookie: res.headers.get("set-cookie")?.split(";")[0] };
    };
    const logout = (cookie: string, origin: string | null = server.url) =>
      fetch(`${server.url}/status/logout`, {
        method: "POST",
        redirect: "manual",
        headers: { cookie, ...(origin === null ? {} : { origin }) },
      });
    const sees = async (cookie: string) => (await fetch(`${server.url}/status.json`, { headers: { cookie } })).status;

    // two logins each for alice and bob (2 per token): whatever earlier tests left, the server now holds its 4
    const [, a2, b1, b2] = [await login(ALICE), await login(ALICE), await login(BOB), await login(BOB)];
    for (const l of [a2, b1, b2]) expect(await sees(l.cookie!)).toBe(200);
    // full: a token without a login is refused, naming the setting, rather than ending someone else's login
    const refused = await login(ADMIN);
    expect(refused.status).toBe(429);
    expect(refused.text).toMatch(/maximum of 4 status page logins \(server\.maxStatusLogins\)/);
    expect(refused.cookie).toBeUndefined();
    // a token at its own cap ends its own oldest login, not anyone else's
    const b3 = await login(BOB);
    expect(b3.status).toBe(303);
    expect(await sees(b1.cookie!)).toBe(401);
    expect([await sees(b2.cookie!), await sees(b3.cookie!), await sees(a2.cookie!)]).toEqual([200, 200, 200]);

    // logging out needs this server's page, as logging in does
    expect((await logout(b3.cookie!, null)).status).toBe(403);
    expect((await logout(b3.cookie!, "http://evil.example")).status).toBe(403);
    expect(await sees(b3.cookie!)).toBe(200);
    const out = await logout(b3.cookie!);
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/status");
    expect(out.headers.get("set-cookie")).toMatch(/^weact_status=; HttpOnly; SameSite=Strict; Path=\/; Max-Age=0$/);
    // the login is gone on the server: the old cookie, sent again, no longer works
    expect(await sees(b3.cookie!)).toBe(401);
    expect(await sees(b2.cookie!)).toBe(200);
    // and its place is free again
    const admin = await login(ADMIN);
    expect(admin.status).toBe(303);
    expect(await sees(admin.cookie!)).toBe(200);
    expect((await logout(admin.cookie!)).status).toBe(303);
  });

  it("in Chromium: log in, see one's own session as text, follow a load_lora, never see another identity's session", async () => {
    const mine = await call<{ session_id: string }>(alice.client, "create_session", { task: XSS });
    const theirs = await call<{ session_id: string }>(bob.client, "create_session", { task: "bob's private task" });
    // a finished run for the timeline
    await new OpenAI({ baseURL: `${server.url}/v1`, apiKey: ALICE, maxRetries: 0 }).chat.completions.create({
      model: "weact-hard",
      messages: [{ role: "user", content: "Which river flows through Paris?" }],
      max_tokens: 8,
    });

    // a run whose output loops (the random model's one base turn): the page must mark it, not show it as answered
    const junk = await call<{ finish: string; answer: string }>(
      alice.client,
      "run_task",
      { task: "Which river flows through Paris?", policy: "base", soft: { turns: 1 } },
      { timeout: 120_000 },
    );
    expect(junk).toMatchObject({ finish: "degenerate", answer: "" });

    const page = await browser.newPage();
    const problems: string[] = [];
    page.on("console", (m) => void (m.type() === "error" && problems.push(`console: ${m.text()}`)));
    page.on("pageerror", (e) => void problems.push(`page error: ${e.message}`));
    page.on("dialog", (d) => {
      problems.push(`dialog: ${d.message()}`);
      void d.dismiss();
    });
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.goto(`${server.url}/status`);
    await page.fill("#token", ALICE);
    await Promise.all([page.waitForURL(`${server.url}/status`), page.click("button[type=submit]")]);
    const row = page.locator("#sessions tbody tr", { hasText: mine.session_id });
    await row.waitFor();
    expect(await row.locator("td").nth(1).textContent()).toBe(XSS);
    expect(await page.locator("#sessions img").count()).toBe(0);
    expect(await row.locator("td").nth(2).textContent()).toBe("base");
    const cookies = await browser.cookies(server.url);
    expect(cookies.find((c) => c.name === "weact_status")).toMatchObject({ httpOnly: true, sameSite: "Strict" });

    await call(alice.client, "load_lora", { session_id: mine.session_id, adapter: "plan" });
    await page.waitForFunction(
      (id) =>
        [...document.querySelectorAll("#sessions tbody tr")].some(
          (tr) => tr.textContent!.includes(id) && tr.children[2]!.textContent === "plan",
        ),
      mine.session_id,
      { timeout: 10_000 },
    );

    const body = (await page.textContent("body"))!;
    expect(body).not.toContain(theirs.session_id);
    expect(body).not.toContain("bob's private task");
    expect(await page.textContent("#sessions-others")).toMatch(/1 idle/);
    expect(await page.locator("#runs .run .seg.model").count()).toBeGreaterThan(0);
    const marked = page.locator("#runs .run.degenerate");
    await marked.waitFor();
    expect(await marked.count()).toBe(1);
    expect(await marked.locator(".mark.degenerate").textContent()).toBe("degenerate: repetition");
    expect(await marked.locator(".mark.degenerate").getAttribute("title")).toMatch(
      /repeat one earlier in the same turn/,
    );
    expect(await marked.locator(".run-head").textContent()).toMatch(/ · finish degenerate/);
    // the OpenAI run (8 tokens a turn) answered: no mark
    const answered = page.locator("#runs .run:not(.degenerate)");
    expect(await answered.count()).toBe(1);
    expect(await answered.locator(".mark").count()).toBe(0);
    expect(await answered.locator(".run-head").textContent()).toMatch(/ · finish (answer|budget)/);
    await page.screenshot({ path: join(SHOTS, "status-wide.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(300);
    // narrow: nothing wider than the screen but the tables' own scroll boxes
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await page.screenshot({ path: join(SHOTS, "status-narrow.png"), fullPage: true });
    console.log(`status page screenshots: ${join(SHOTS, "status-wide.png")}, ${join(SHOTS, "status-narrow.png")}`);

    // the page offers to log out a form login, and doing so ends it: the login form again, no cookie, no data
    const sid = (await browser.cookies(server.url)).find((c) => c.name === "weact_status")!.value;
    await Promise.all([page.waitForURL(`${server.url}/status`), page.click("#logout button")]);
    await page.locator("#token").waitFor();
    expect((await browser.cookies(server.url)).find((c) => c.name === "weact_status")).toBeUndefined();
    expect((await fetch(`${server.url}/status.json`, { headers: { cookie: `weact_status=${sid}` } })).status).toBe(401);
    expect(problems).toEqual([]);
    await page.close();

    // an admin sees every identity's sessions, with their owners
    const admin = (await (
      await fetch(`${server.url}/status.json`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).json()) as {
      viewer: { admin: boolean };
      sessions: { mine: { id: string; owner: string }[]; others: object };
    };
    expect(admin.viewer.admin).toBe(true);
    expect(admin.sessions.mine).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: mine.session_id, owner: "token:alice" }),
        expect.objectContaining({ id: theirs.session_id, owner: "token:bob" }),
      ]),
    );
    expect(admin.sessions.others).toEqual({});
  });

  it("a run waiting on the client's tools expires: its slot is freed and its trace ends cancelled", async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: BOB, maxRetries: 0 });
    const before = (await statusJson(BOB)).sessions.mine.length;
    const r = await client.chat.completions.create({
      model: "base",
      messages: [{ role: "user", content: "Weather in Rome?" }],
      tools: [
        {
          type: "function",
          function: {
            name: "get_weather",
            parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome"] } } },
          },
        },
      ],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      max_tokens: 200,
    });
    expect(r.choices[0]!.finish_reason).toBe("tool_calls");
    const traceId = (r as unknown as { weact: { trace_id: string } }).weact.trace_id;
    let s = await statusJson(BOB);
    expect(s.suspended_runs).toBe(1);
    expect(s.sessions.mine.length).toBe(before + 1);
    for (let i = 0; i < 60 && (s.suspended_runs > 0 || s.sessions.mine.length > before); i++) {
      await new Promise((res) => setTimeout(res, 100));
      s = await statusJson(BOB);
    }
    expect(s.suspended_runs).toBe(0);
    expect(s.sessions.mine.length).toBe(before);
    expect(s.runs.mine.find((x) => x.trace_id === traceId)?.state).toBe("cancelled");
  });
});
