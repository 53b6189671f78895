// The MiniDock dashboard: polls /api/status (the `status --json` document) and
// /api/traffic (the ingress proxies' request counters), and follows /api/events
// (Server-Sent Events). Plain DOM, no build step; text only through textContent, never
// as HTML.
const POLL_MS = 3000;
const EVENTS_SHOWN = 30;
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function tone(word) {
  if (["converged", "ready", "running", "healthy", "completed"].includes(word)) return "ok";
  if (["failed", "down", "paused", "dead", "unhealthy", "exited", "unreachable"].includes(word)) return "bad";
  if (["stopped", "none", "drained"].includes(word)) return "info";
  return "warn";
}

function bar(part, whole, cls = "") {
  const pct = whole > 0 ? Math.min(100, Math.round((100 * part) / whole)) : 0;
  const span = el("span");
  span.style.width = `${pct}%`;
  return el("div", { class: `bar ${cls}`, role: "progressbar", "aria-valuenow": String(part),
    "aria-valuemax": String(whole) }, span);
}

function documents(body) {
  if (!body) return [];
  return Array.isArray(body.clusters) ? body.clusters : [body];
}

function serviceCard(doc, s, tasks, several) {
  const word = s.state;
  const full = s.desired === "stopped" || s.healthy >= s.replicas;
  const card = el("article", { class: "card", "data-service": s.name },
    el("h3", {}, several ? `${doc.cluster} / ${s.name}` : s.name, el("span", { class: `badge ${tone(word)}` }, word)),
    el("p", { class: "figure" }, el("span", { class: "running" }, s.running), ` / ${s.replicas}`,
      el("small", {}, ` running · ${s.healthy} healthy`)),
    bar(s.healthy, s.replicas, full ? "" : "warn"),
    el("p", { class: "sub" }, s.image));
  if (s.autoscale) card.append(el("p", { class: "sub autoscale" }, autoscaleLine(s.autoscale)));
  for (const f of s.failed) card.append(el("p", { class: "sub bad" }, `slot ${f.slot} FAILED: ${f.last_exit}`));
  for (const p of s.pending) card.append(el("p", { class: "sub warn" }, `slot ${p.slot} pending: ${p.reason}`));
  for (const r of s.recovery || []) card.append(recoveryLine(r));
  for (const k of new Set((s.recovery || []).filter((r) => r.kept_on).map((r) => `${r.slot}@${r.kept_on}`))) {
    card.append(el("p", { class: "sub warn" }, `slot ${k.split("@")[0]}: old volume kept on ${k.split("@")[1]} (may hold writes newer than the snapshot)`));
  }
  const list = el("ul", { class: "tasks" });
  for (const t of tasks.filter((t) => t.service === s.name)) {
    const shown = t.health !== "none" && t.state === "running" ? t.health : t.state;
    list.append(el("li", { class: tone(shown), title: t.name }, `${t.slot}@${t.host} ${shown}`));
  }
  card.append(list);
  return card;
}

function age(seconds) {
  if (seconds < 120) return `${Math.round(seconds)}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86400)}d`;
}

// a pinned slot's recovery point: its newest snapshot's age (docs/backups.md)
function recoveryLine(r) {
  if (r.taken === null) return el("p", { class: "sub warn" }, `slot ${r.slot} ${r.volume}: no snapshot known`);
  const old = Math.max(0, Date.now() / 1000 - r.taken);
  return el("p", { class: "sub" }, `slot ${r.slot} ${r.volume}: snapshot ${r.snapshot.slice(0, 8)}, ${age(old)} old`);
}

function hostCard(doc, h, tasks, several) {
  const word = h.drained ? "drained" : h.state;
  const card = el("article", { class: "card", "data-host": h.name },
    el("h3", {}, several ? `${doc.cluster} / ${h.name}` : h.name, el("span", { class: `badge ${tone(word)}` }, word)),
    el("p", { class: "sub" }, h.address));
  if (h.error) card.append(el("p", { class: "sub bad" }, `not observed: ${h.error}`));
  const cpus = h.cpus.total == null ? `${h.cpus.used} reserved` : `${h.cpus.used} of ${h.cpus.total}`;
  const mib = (b) => `${Math.round(b / 1048576)} MiB`;
  const mem = h.memory.total == null ? `${mib(h.memory.used)} reserved` : `${mib(h.memory.used)} of ${mib(h.memory.total)}`;
  card.append(el("dl", {}, el("dt", {}, "tasks"), el("dd", { class: "host-tasks" }, h.tasks),
    el("dt", {}, "cpus"), el("dd", {}, cpus), el("dt", {}, "memory"), el("dd", {}, mem)));
  if (h.cpus.total) card.append(bar(h.cpus.used, h.cpus.total, h.overcommitted ? "bad" : ""));
  const list = el("ul", { class: "tasks" });
  for (const t of tasks.filter((t) => t.host === h.name)) {
    list.append(el("li", { class: tone(t.state), title: t.name }, `${t.service}.${t.slot} ${t.state}`));
  }
  card.append(list);
  return card;
}

function rolloutCard(doc, s, several) {
  const r = s.rollout;
  const card = el("article", { class: "card", "data-rollout": s.name },
    el("h3", {}, several ? `${doc.cluster} / ${s.name}` : s.name, el("span", { class: `badge ${tone(r.status)}` }, r.status)),
    el("p", { class: "figure" }, `${r.done} / ${r.total}`, el("small", {}, " slots replaced")),
    bar(r.done, r.total, r.status === "paused" ? "bad" : ""),
    el("p", { class: "sub" }, r.reason || `${r.failures} failures`));
  if (r.canary) card.append(el("p", { class: "sub canary" }, canaryLine(r.canary)));
  return card;
}

// An autoscaled service's bounds, target and latest decision (docs/autoscale.md), as
// `status` prints it.
function autoscaleLine(a) {
  return `autoscaled ${a.min}..${a.max}, target ${a.target}: ${a.reason || "no decision yet"}`;
}

// A canary beside the old tasks (docs/rollouts.md#canary), as `status` prints it.
function canaryLine(c) {
  const share = c.weight ? `${c.weight}% of requests` : "round-robin share";
  const how = c.promoted ? "promoted" : `promote ${c.promote}`;
  return `canary ${c.tasks}/${c.wanted}, ${share}, ${how}`;
}

function render(body, problems) {
  const docs = documents(body);
  const several = docs.length > 1;
  const services = [], hosts = [], rollouts = [];
  scaled.clear();
  for (const doc of docs) {
    for (const s of doc.services) {
      if (s.autoscale) scaled.set(`${doc.cluster}\u0000${s.name}`, { replicas: s.replicas, max: s.autoscale.max });
      services.push(serviceCard(doc, s, doc.tasks, several));
      if (["updating", "canary", "rolling_back", "paused"].includes(s.rollout.status)) rollouts.push(rolloutCard(doc, s, several));
    }
    for (const h of doc.hosts) hosts.push(hostCard(doc, h, doc.tasks, several));
    if (doc.guard) problems.push(doc.guard);
  }
  $("services").replaceChildren(...(services.length ? services : [el("p", { class: "muted" }, "no services")]));
  $("hosts").replaceChildren(...(hosts.length ? hosts : [el("p", { class: "muted" }, "no hosts")]));
  $("rollouts").replaceChildren(...(rollouts.length ? rollouts : [el("p", { class: "muted" }, "none under way")]));
  $("clusters").textContent = docs.map((d) => `${d.cluster} (generation ${d.generation}${d.converged ? ", converged" : ""})`).join(" · ");
  const box = $("problems");
  box.replaceChildren(...problems.map((p) => el("p", {}, p)));
  box.hidden = problems.length === 0;
}

// Request metrics (docs/observability.md#request-metrics): each route's counters summed
// over the ingress proxies, kept for the last HISTORY readings; the chart shows the rate
// between two readings, by status class, and the latency of the requests between them.
const HISTORY = 40;
const CLASSES = ["2xx", "3xx", "4xx", "5xx"];
const history = new Map(); // "cluster service route" -> [{at, counts, seconds, buckets, replicas}]
// each autoscaled service's count in the latest status ("cluster service" -> {replicas, max}),
// charted beside its routes' request rate (docs/autoscale.md)
const scaled = new Map();

function sumRoutes(body) {
  const found = new Map();
  for (const c of body.clusters) {
    for (const p of c.proxies) {
      if (p.error) continue;
      for (const r of p.routes) {
        const key = `${c.cluster}\u0000${r.service}\u0000${r.route}`;
        const s = found.get(key) || { cluster: c.cluster, service: r.service, route: r.route,
          counts: {}, count: 0, seconds: 0, buckets: new Map() };
        for (const [k, v] of Object.entries(r.classes)) s.counts[k] = (s.counts[k] || 0) + v;
        s.count += r.count;
        s.seconds += r.seconds;
        for (const [le, n] of r.buckets) s.buckets.set(le, (s.buckets.get(le) || 0) + n);
        found.set(key, s);
      }
    }
  }
  return found;
}

function intervals(points) {
  const out = [];
  for (let i = 1; i < points.length; i++) {
    const a = points[i - 1], b = points[i], dt = b.at - a.at, n = b.count - a.count;
    if (dt <= 0 || n < 0) continue; // no time passed, or a proxy restarted (counters reset)
    const rates = {};
    for (const k of CLASSES) rates[k] = ((b.counts[k] || 0) - (a.counts[k] || 0)) / dt;
    let p99 = null;
    for (const [le, m] of [...b.buckets.entries()].sort((x, y) => x[0] - y[0])) {
      if (n > 0 && m - (a.buckets.get(le) || 0) >= 0.99 * n) { p99 = le; break; }
    }
    out.push({ rates, total: n / dt, mean: n > 0 ? (b.seconds - a.seconds) / n : null, p99,
      replicas: b.replicas, max: b.max });
  }
  return out;
}

const SVG = "http://www.w3.org/2000/svg";
function chart(points) {
  const w = 240, h = 60, step = w / HISTORY;
  const top = Math.max(1, ...points.map((p) => p.total));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "requests per second by status class");
  points.slice(-HISTORY).forEach((p, i) => {
    let y = h;
    for (const k of CLASSES) {
      const bar = (h * p.rates[k]) / top;
      if (bar <= 0) continue;
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("x", String(i * step));
      rect.setAttribute("y", String(y - bar));
      rect.setAttribute("width", String(Math.max(1, step - 1)));
      rect.setAttribute("height", String(bar));
      rect.setAttribute("class", `c${k}`);
      svg.append(rect);
      y -= bar;
    }
  });
  const counted = points.slice(-HISTORY).map((p, i) => [i, p]).filter(([, p]) => p.replicas != null);
  if (counted.length) { // an autoscaled service's count, on a scale of 0..max
    const line = document.createElementNS(SVG, "polyline");
    const most = Math.max(1, ...counted.map(([, p]) => p.max));
    line.setAttribute("points", counted.map(([i, p]) => `${(i + 0.5) * step},${h - (h * p.replicas) / most}`).join(" "));
    line.setAttribute("class", "replicas");
    svg.append(line);
    svg.setAttribute("aria-label", "requests per second by status class, and the autoscaled count");
  }
  return svg;
}

function trafficCard(s, points, several) {
  const last = points[points.length - 1];
  const fmt = (x) => (x >= 10 ? x.toFixed(0) : x.toFixed(1));
  const ms = (x) => (x == null ? "–" : `${(x * 1000).toFixed(x < 0.01 ? 1 : 0)} ms`);
  const errors = last && last.total > 0 ? (100 * last.rates["5xx"]) / last.total : 0;
  const card = el("article", { class: "card", "data-route": `${s.service} ${s.route}` },
    el("h3", {}, several ? `${s.cluster} / ${s.service}` : s.service, el("span", { class: "sub" }, s.route)),
    el("p", { class: "figure" }, last ? fmt(last.total) : "–", el("small", {}, " requests/s")),
    chart(points),
    el("p", { class: "sub" }, last ? `5xx ${errors.toFixed(1)}% · mean ${ms(last.mean)} · p99 ≤ ${ms(last.p99)}`
      : "counting since the proxies started: a rate needs two readings"),
    el("p", { class: "sub" }, CLASSES.map((k) => `${k} ${s.counts[k] || 0}`).join(" · ")));
  if (last && last.replicas != null) {
    card.append(el("p", { class: "sub autoscale" }, `${last.replicas} tasks (autoscaled, of at most ${last.max}): the line`));
  }
  return card;
}

async function refreshTraffic() {
  const res = await fetch("/api/traffic", { cache: "no-store", credentials: "same-origin" });
  if (!res.ok) return;
  const body = await res.json();
  const now = sumRoutes(body);
  const several = new Set(body.clusters.map((c) => c.cluster)).size > 1;
  const cards = [];
  for (const [key, s] of now) {
    const list = history.get(key) || [];
    const count = scaled.get(`${s.cluster}\u0000${s.service}`) || { replicas: null, max: null };
    if (!list.length || list[list.length - 1].at !== body.at) list.push({ at: body.at, ...s, ...count });
    while (list.length > HISTORY + 1) list.shift();
    history.set(key, list);
    cards.push(trafficCard(s, intervals(list), several));
  }
  const unread = body.clusters.flatMap((c) => c.proxies.filter((p) => p.error).map((p) => `${p.host}: ${p.error}`));
  for (const u of unread) cards.push(el("p", { class: "sub bad" }, `ingress proxy not read: ${u}`));
  const off = body.clusters.filter((c) => c.proxies.some((p) => !p.error && p.request_metrics === false));
  for (const c of off) cards.push(el("p", { class: "muted" }, `${c.cluster}: request metrics off ([ingress] request_metrics = false)`));
  $("traffic").replaceChildren(...(cards.length ? cards : [el("p", { class: "muted" }, "no request counted yet")]));
}

async function refresh() {
  try {
    const res = await fetch("/api/status", { cache: "no-store", credentials: "same-origin" });
    if (res.status === 401) {
      render(null, ["unauthorized: open this page as /?token=YOUR_TOKEN once"]);
      return;
    }
    const body = await res.json();
    const observed = Number(res.headers.get("X-Minidock-Observed-At")) * 1000;
    if (res.ok) render(body, []);
    else render(body.status, body.errors || [`the server answered ${res.status}`]);
    $("freshness").textContent = `observed ${new Date(observed || Date.now()).toLocaleTimeString()} · live`;
    await refreshTraffic();
  } catch (err) {
    $("freshness").textContent = `disconnected (${err.message}); retrying`;
  }
}

function eventTone(kind) {
  if (/fail|down|paused|lost|guard/.test(kind)) return "bad";
  if (/ready|up|completed|converged/.test(kind)) return "ok";
  return "info";
}

const seen = new Set();
function showEvent(e) {
  const key = `${e.cluster}:${e.id}`;
  if (seen.has(key)) return;
  seen.add(key);
  const at = new Date(e.at * 1000);
  const item = el("li", {}, el("time", { datetime: at.toISOString() }, at.toLocaleTimeString()),
    el("span", { class: `kind ${eventTone(e.kind)}` }, e.kind), e.message);
  const list = $("events");
  list.prepend(item);
  while (list.children.length > EVENTS_SHOWN) list.lastElementChild.remove();
}

let soon = null;
function followEvents() {
  const source = new EventSource(`/api/events?follow=1&limit=${EVENTS_SHOWN}`);
  source.onmessage = (m) => {
    showEvent(JSON.parse(m.data));
    clearTimeout(soon);
    soon = setTimeout(refresh, 500); // something changed: look again soon
  };
}

refresh();
setInterval(refresh, POLL_MS);
followEvents();
