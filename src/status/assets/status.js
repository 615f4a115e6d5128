// The status page: polls /status.json and renders it. Every text from the server is set as text (textContent),
// never parsed as HTML: tasks and ids come from other people's input.
"use strict";

const REFRESH_MS = 2000;
const KINDS = ["setup", "model", "tool", "control", "cache", "client"];
const ROUTE_COLOURS = 6;
const routeClass = new Map();

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "title") node.title = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function dl(target, pairs) {
  target.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

const age = (s) => (s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` : `${(s / 3600).toFixed(1)} h`);
const bytes = (n) =>
  n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / (1 << 20)).toFixed(1)} MiB`;
const counts = (o) =>
  Object.entries(o)
    .map(([k, n]) => `${n} ${k}`)
    .join(", ") || "none";

function colourOf(route) {
  if (!routeClass.has(route)) routeClass.set(route, `route-${routeClass.size % ROUTE_COLOURS}`);
  return routeClass.get(route);
}

function rows(table, items, cells) {
  const body = table.tBodies[0];
  const labels = [...table.tHead.rows[0].cells].map((th) => th.textContent);
  // data-label: narrow screens show each row as a card of "label value" lines
  body.replaceChildren(
    ...items.map((item) => el("tr", {}, ...cells(item).map((c, i) => el("td", { "data-label": labels[i] }, c)))),
  );
  if (!items.length)
    body.append(el("tr", {}, el("td", { colspan: String(table.tHead.rows[0].cells.length), class: "note" }, "none")));
}

function timeline(run) {
  const total = Math.max(1, run.wall_ms);
  const lanes = KINDS.map((kind) => {
    const lane = el("div", { class: "lane" });
    for (const s of run.segments.filter((x) => x.kind === kind)) {
      const label = kind === "model" ? `model (${s.route}) ${s.ms} ms` : `${kind} ${s.ms} ms`;
      const seg = el("span", { class: `seg ${kind} ${kind === "model" ? colourOf(s.route) : ""}`, title: label });
      // CSSOM properties, not a style attribute: allowed under the page's CSP
      seg.style.left = `${(100 * s.startMs) / total}%`;
      seg.style.width = `${Math.max(0.3, (100 * s.ms) / total)}%`;
      lane.append(seg);
    }
    return el("div", { class: "lane-row" }, el("span", { class: "lane-name" }, kind), lane);
  });
  const routes = [...new Set(run.segments.filter((x) => x.kind === "model").map((x) => x.route))];
  const models = el(
    "ul",
    { class: "legend routes" },
    ...routes.map((r) => el("li", {}, el("span", { class: `swatch ${colourOf(r)}` }), `model: ${r}`)),
  );
  // a run that returned no answer, or one nothing it read supports, is marked: never shown as a plain "done"
  const marks = [
    ...(run.degenerate
      ? [el("span", { class: "mark degenerate", title: run.degenerate.detail }, `degenerate: ${run.degenerate.rule}`)]
      : []),
    ...(run.grounded === false
      ? [el("span", { class: "mark ungrounded", title: "the answer occurs in nothing the run read" }, "ungrounded")]
      : []),
  ];
  return el(
    "article",
    { class: `run${run.degenerate ? " degenerate" : ""}` },
    el(
      "p",
      { class: "run-head" },
      el("strong", {}, run.policy),
      ` · ${run.state}`,
      run.finish ? ` · finish ${run.finish}` : "",
      run.stage ? ` · stage ${run.stage}` : "",
      ` · ${(run.wall_ms / 1000).toFixed(1)} s · ${age(run.age_s)} ago`,
      ...marks,
    ),
    el("p", { class: "task" }, run.task),
    el("div", { class: "timeline" }, ...lanes),
    models,
  );
}

function render(d) {
  document.getElementById("meta").textContent =
    `${d.viewer.identity ?? "local user"}${d.viewer.admin ? " (admin)" : ""} · updated ${new Date(d.generated_at).toLocaleTimeString()}`;
  // only a login through the form can be ended here; a bearer token or an open server has none
  document.getElementById("logout").hidden = !d.viewer.logged_in;
  dl(document.getElementById("model"), [
    ["file", d.model.file],
    ["architecture", d.model.architecture],
    ["hash", d.model.sha256.slice(0, 16)],
  ]);
  const c = d.cache;
  dl(document.getElementById("cache"), [
    ["strategy", c.strategy],
    ["contexts", c.contexts],
    ["sequences", c.sequences],
    ["idle lanes", c.idleLanes],
    ["spilled lanes", c.spilledLanes],
    ["spilled", bytes(c.spilledBytes)],
    ["evictions", `${c.evictions.spilled} spilled, ${c.evictions.dropped} dropped`],
    // evaluation for callers and ahead of time, apart: background work is never hidden in anyone's wait
    ["evaluated", `${c.evaluatedTokens.foreground} tokens for callers, ${c.evaluatedTokens.background} ahead of time`],
    [
      "background",
      c.background.enabled
        ? `${c.background.batches} decodes, ${(c.background.ms / 1000).toFixed(1)} s, gave way ${c.background.yields}x, ${c.background.lanesStarted} caches started`
        : "off",
    ],
    [
      "shared prefixes",
      c.sharedPrefixes.enabled
        ? `${c.sharedPrefixes.entries} (${bytes(c.sharedPrefixes.bytes)}), ${c.sharedPrefixes.hits} restores`
        : "off",
    ],
  ]);
  dl(document.getElementById("work"), [
    ["queued", `${d.queue.pending} of ${d.queue.maxPending}`],
    ["running", d.queue.running],
    ["connections", d.connections],
    ["waiting on clients", d.suspended_runs],
  ]);
  rows(document.getElementById("adapters"), d.adapters, (a) => [
    a.alias,
    a.sha256 ? a.sha256.slice(0, 16) : "—",
    a.scale,
    a.resident ? "yes" : "no",
  ]);
  rows(document.getElementById("sessions"), d.sessions.mine, (s) => [
    s.owner ? `${s.id} · ${s.owner}` : s.id,
    s.task,
    s.adapter ?? "base",
    s.turns,
    age(s.age_s),
    s.state,
  ]);
  document.getElementById("sessions-others").textContent = `Other clients' sessions: ${counts(d.sessions.others)}`;
  const runs = document.getElementById("runs");
  runs.replaceChildren(...d.runs.mine.map(timeline));
  if (!d.runs.mine.length) runs.append(el("p", { class: "note" }, "no runs yet"));
  document.getElementById("runs-others").textContent = `Other clients' runs: ${counts(d.runs.others)}`;
  document
    .getElementById("legend")
    .replaceChildren(...KINDS.map((k) => el("li", {}, el("span", { class: `swatch ${k}` }), k)));
}

async function refresh() {
  try {
    const res = await fetch("/status.json", { credentials: "same-origin", cache: "no-store" });
    if (res.status === 401) {
      window.location.assign("/status");
      return;
    }
    if (res.ok) render(await res.json());
    else document.getElementById("meta").textContent = `status unavailable (HTTP ${res.status})`;
  } catch {
    document.getElementById("meta").textContent = "the server did not answer; retrying";
  }
  setTimeout(refresh, REFRESH_MS);
}

refresh();
