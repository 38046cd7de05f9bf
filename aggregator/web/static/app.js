// cgpilot aggregator dashboard: fetches /api/v1/* and draws SVG charts.
// body[data-ready] is set once every chart is drawn (the browser test waits
// for it); body[data-error] carries a failure; body[data-login] is set
// while the page asks for a token.
//
// Every API call carries the user's bearer token, kept in this tab's
// sessionStorage; a #token=...&namespace=... fragment (never sent to a
// server) is moved there and removed from the address bar. A user who may
// read only namespaces sees the one it names (?namespace=).
"use strict";

const NS = "http://www.w3.org/2000/svg";
const C = { cpu: "#2f6fdb", mem: "#e0823d", ok: "#2f9e6f", warn: "#d9534f", grey: "#aab1bf", line: "#e3e6ec", muted: "#6b7385" };
const REASONS = ["#f0ad4e", "#c77c2e", "#b35c9e", "#7d5ba6", "#8a6d3b", "#5bc0de"];

function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function text(parent, x, y, s, attrs) {
  const t = el("text", Object.assign({ x, y, "font-size": 11, fill: C.muted }, attrs || {}), parent);
  t.textContent = s;
  return t;
}
function svg(container, w, h) {
  container.textContent = "";
  return el("svg", { viewBox: `0 0 ${w} ${h}`, role: "img" }, container);
}
function cores(v) {
  if (Math.abs(v) >= 100) return v.toFixed(0) + " cores";
  if (Math.abs(v) >= 1) return v.toFixed(1) + " cores";
  return Math.round(v * 1000) + "m";
}
function bytes(v) {
  const g = v / 2 ** 30;
  if (Math.abs(g) >= 1) return g.toFixed(Math.abs(g) >= 100 ? 0 : 1) + " GiB";
  return Math.round(v / 2 ** 20) + " MiB";
}
function pct(v) { return (100 * v).toFixed(0) + "%"; }
function esc(s) { const d = document.createElement("div"); d.textContent = String(s); return d.innerHTML; }
const session = {
  get token() { return sessionStorage.getItem("cgpilot-token") || ""; },
  set token(v) { v ? sessionStorage.setItem("cgpilot-token", v) : sessionStorage.removeItem("cgpilot-token"); },
  get namespace() { return sessionStorage.getItem("cgpilot-namespace") || ""; },
  set namespace(v) { v ? sessionStorage.setItem("cgpilot-namespace", v) : sessionStorage.removeItem("cgpilot-namespace"); },
};
(function fromFragment() {
  const f = new URLSearchParams(location.hash.slice(1));
  if (f.has("token")) session.token = f.get("token");
  if (f.has("namespace")) session.namespace = f.get("namespace");
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
})();
class HTTPError extends Error {
  constructor(path, status, msg) { super(`${path}: ${status} ${msg}`); this.status = status; }
}
let scope = "";  // "" : the cluster's views; else the one namespace the user reads
async function get(path) {
  if (scope) path += (path.includes("?") ? "&" : "?") + "namespace=" + encodeURIComponent(scope);
  const r = await fetch(path, { cache: "no-store", headers: session.token ? { Authorization: "Bearer " + session.token } : {} });
  if (!r.ok) {
    let msg = "";
    try { msg = (await r.json()).error || ""; } catch (e) { /* not JSON */ }
    throw new HTTPError(path, r.status, msg);
  }
  return r.json();
}
function showLogin(msg) {
  document.body.dataset.login = "1";
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = msg || "";
  document.getElementById("login-ns").value = session.namespace;
}
function keyStr(k) { return `${k.namespace}/${k.kind}/${k.name}/${k.container}`; }

function tiles(s) {
  const cov = s.coverage;
  const items = s.namespace ? [[s.namespace, "namespace (your access)"]] : [
    [s.nodes - s.staleNodes, `nodes reporting${s.staleNodes ? ` (${s.staleNodes} silent)` : ""}`],
    [s.hotNodes, `hot nodes (> ${pct(s.hotWatermark)} used)`]];
  items.push(
    [`${cov.workloadsUnderPolicy} / ${cov.workloads}`, "workloads under a policy"],
    [cores(s.cluster.releasedCPU), `CPU released of ${cores(s.cluster.beforeCPU)}`],
    [bytes(s.cluster.releasedMemory), `memory released of ${bytes(s.cluster.beforeMemory)}`],
    [s.recommendations, "merged recommendations"]);
  document.getElementById("tiles").innerHTML = items.map(([v, l]) => `<div class="tile"><b>${esc(v)}</b><span>${esc(l)}</span></div>`).join("");
  document.getElementById("replica").textContent = `${s.replica || "aggregator"} · ${s.leader ? "leader" : "follower"} · ${s.reportsAccepted} reports · updated ${new Date(s.generated).toLocaleTimeString()}`;
}

// Coverage: one stacked bar of workload-containers, and the legend.
function coverage(cov) {
  const parts = [["adjustable", cov.adjustable, C.ok]];
  Object.entries(cov.notAdjustable || {}).filter(([r]) => r !== "MatchedByTwoPolicies").sort((a, b) => b[1] - a[1])
    .forEach(([r, n], i) => parts.push([`not adjustable: ${r}`, n, REASONS[i % REASONS.length]]));
  parts.push(["several policies", cov.multiplePolicies, C.warn], ["no policy", cov.noPolicy, C.grey]);
  const total = parts.reduce((a, p) => a + p[1], 0);
  const W = 520, rows = parts.filter(p => p[1] > 0);
  const s = svg(document.getElementById("coverage"), W, 60 + 18 * Math.ceil(rows.length / 2));
  if (!total) { text(s, 0, 20, "no reports yet"); return; }
  let x = 0;
  for (const [label, n, color] of parts) {
    if (!n) continue;
    const w = (W * n) / total;
    el("rect", { x, y: 8, width: Math.max(w, 1), height: 26, fill: color, "data-series": label }, s).appendChild(document.createElementNS(NS, "title")).textContent = `${label}: ${n}`;
    if (w > 34) text(s, x + 4, 26, String(n), { fill: "#fff", "font-weight": 600 });
    x += w;
  }
  rows.forEach(([label, n, color], i) => {
    const lx = (i % 2) * (W / 2), ly = 52 + 18 * Math.floor(i / 2);
    el("rect", { x: lx, y: ly - 9, width: 10, height: 10, fill: color }, s);
    text(s, lx + 14, ly, `${label} — ${n} (${pct(n / total)})`, { fill: "#1d2433" });
  });
}

// Released capacity: per namespace, CPU and memory bars on their own scales.
function released(cap) {
  const rows = (cap.namespaces || []).filter(n => n.releasedCPU !== 0 || n.releasedMemory !== 0).slice(0, 10);
  const W = 520, rowH = 30, left = 110, half = (W - left) / 2;
  const s = svg(document.getElementById("released"), W, 26 + rowH * Math.max(rows.length, 1));
  text(s, left, 12, "CPU (cores)", { fill: C.cpu, "font-weight": 600 });
  text(s, left + half, 12, "memory", { fill: C.mem, "font-weight": 600 });
  if (!rows.length) { text(s, 0, 40, "nothing released yet"); return; }
  const maxC = Math.max(...rows.map(r => Math.abs(r.releasedCPU)), 1e-9);
  const maxM = Math.max(...rows.map(r => Math.abs(r.releasedMemory)), 1);
  rows.forEach((r, i) => {
    const y = 22 + i * rowH;
    text(s, 0, y + 14, r.namespace, { fill: "#1d2433" });
    const wc = ((half - 90) * Math.abs(r.releasedCPU)) / maxC, wm = ((half - 70) * Math.abs(r.releasedMemory)) / maxM;
    el("rect", { x: left, y: y + 3, width: Math.max(wc, 1), height: 16, fill: r.releasedCPU < 0 ? C.warn : C.cpu, "data-series": "cpu" }, s);
    text(s, left + wc + 4, y + 15, cores(r.releasedCPU));
    el("rect", { x: left + half, y: y + 3, width: Math.max(wm, 1), height: 16, fill: r.releasedMemory < 0 ? C.warn : C.mem, "data-series": "memory" }, s);
    text(s, left + half + wm + 4, y + 15, bytes(r.releasedMemory));
  });
}

// Saturation: CPU and memory lines over time, with the 100% line.
function saturation(sat) {
  const pts = sat.points || [];
  const W = 1080, H = 220, L = 40, R = 10, T = 10, B = 24;
  const s = svg(document.getElementById("saturation"), W, H);
  if (pts.length === 0) { text(s, L, 40, "no samples yet (one point per 5 minutes)"); return; }
  const t0 = Date.parse(pts[0].time), t1 = Math.max(Date.parse(pts[pts.length - 1].time), t0 + 60000);
  const ymax = Math.max(1.2, ...pts.map(p => Math.max(p.cpu, p.memory))) * 1.05;
  const X = t => L + ((W - L - R) * (t - t0)) / (t1 - t0), Y = v => T + (H - T - B) * (1 - v / ymax);
  for (let v = 0; v <= ymax; v += ymax > 3 ? 1 : 0.25) {
    el("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: C.line }, s);
    text(s, 2, Y(v) + 4, pct(v));
  }
  el("line", { x1: L, x2: W - R, y1: Y(1), y2: Y(1), stroke: C.warn, "stroke-dasharray": "4 3" }, s);
  for (let i = 0; i < 5; i++) {
    const t = t0 + ((t1 - t0) * i) / 4;
    text(s, Math.min(X(t) - 16, W - R - 56), H - 6, new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  }
  for (const [key, color] of [["cpu", C.cpu], ["memory", C.mem]]) {
    const d = pts.map((p, i) => `${i ? "L" : "M"}${X(Date.parse(p.time)).toFixed(1)},${Y(p[key]).toFixed(1)}`).join(" ");
    el("path", { d, fill: "none", stroke: color, "stroke-width": 2, "data-series": key }, s);
    if (pts.length === 1) el("circle", { cx: X(t0), cy: Y(pts[0][key]), r: 3, fill: color }, s);
  }
  const last = pts[pts.length - 1];
  text(s, W - 230, T + 12, `CPU ${pct(last.cpu)}`, { fill: C.cpu, "font-weight": 600 });
  text(s, W - 140, T + 12, `memory ${pct(last.memory)}`, { fill: C.mem, "font-weight": 600 });
  const sel = document.getElementById("ns");
  if (sel.options.length === 1) for (const n of sat.namespaces || []) sel.add(new Option(n, n));
}

function hot(h) {
  if (!h) {
    document.getElementById("hot").innerHTML = `<div class="empty">the nodes are the cluster's view: your access covers namespace ${esc(scope)}</div>`;
    return;
  }
  document.getElementById("watermark").textContent = `usage above ${pct(h.watermark)} of allocatable`;
  const nodes = h.nodes || [];
  document.getElementById("hot").innerHTML = nodes.length === 0 ? `<div class="empty">no hot node</div>` :
    `<table><tr><th>node</th><th>CPU</th><th>memory</th><th>7-day max CPU</th><th>peak hour</th></tr>` +
    nodes.slice(0, 12).map(n => `<tr><td>${esc(n.name)}</td><td class="${n.cpuFraction > h.watermark ? "bad" : ""}">${pct(n.cpuFraction)}</td>` +
      `<td class="${n.memoryFraction > h.watermark ? "bad" : ""}">${pct(n.memoryFraction)}</td><td>${cores(n.profile.cpu.max7d)}</td>` +
      `<td>${n.profile.days ? String(n.profile.cpu.hour).padStart(2, "0") + ":00 UTC" : "–"}</td></tr>`).join("") + `</table>`;
}

function anomalies(an) {
  const kinds = [["failed writes", an.failedWrites], ["several policies", an.multiplePolicies], ["nodes not reporting", an.nodesNotReporting],
    ["sampling gaps", an.samplingGaps], ["pods admitted without webhook", an.unadmitted]].map(([k, l]) => [k, (l || []).length]);
  const W = 520, rowH = 22, left = 190;
  const s = svg(document.getElementById("anomalies"), W, rowH * kinds.length + 4);
  const max = Math.max(1, ...kinds.map(k => k[1]));
  kinds.forEach(([k, n], i) => {
    const y = i * rowH;
    text(s, 0, y + 15, k, { fill: "#1d2433" });
    el("rect", { x: left, y: y + 4, width: Math.max(((W - left - 40) * n) / max, 1), height: 14, fill: n ? C.warn : C.line, "data-series": k }, s);
    text(s, left + ((W - left - 40) * n) / max + 6, y + 15, String(n));
  });
  const rows = [];
  for (const e of (an.failedWrites || []).slice(0, 3)) rows.push(["failed write", keyStr(e.key), e.error]);
  for (const c of (an.multiplePolicies || []).slice(0, 3)) rows.push(["several policies", keyStr(c.key), c.policies.join(", ")]);
  for (const n of (an.nodesNotReporting || []).slice(0, 3)) rows.push(["silent node", n.node, "last seen " + new Date(n.lastSeen).toLocaleTimeString()]);
  for (const g of (an.samplingGaps || []).slice(0, 3)) rows.push(["sampling gap", g.node, g.missedWindows ? `${g.missedWindows} windows` : `${g.missedRounds} rounds`]);
  for (const u of (an.unadmitted || []).slice(0, 3)) rows.push(["unadmitted", keyStr(u.key), `${u.pods} pods`]);
  document.getElementById("anomaly-list").innerHTML = rows.length ? `<table>${rows.map(r => `<tr>${r.map(c => `<td>${esc(c)}</td>`).join("")}</tr>`).join("")}</table>` : "";
}

function historyTable(h) {
  document.getElementById("history").innerHTML = h.length === 0 ? `<div class="empty">no adjustment yet</div>` :
    `<table><tr><th>time</th><th>what</th><th>container</th><th>pod</th><th>node</th><th>change</th></tr>` +
    h.slice(0, 12).map(e => {
      const fmt = e.resource === "cpu" ? cores : bytes;
      const change = e.kind === "oom" ? `OOM at ${bytes(e.usageBytes)}` : `${e.resource} ${fmt(e.from)} → ${fmt(e.to)}`;
      return `<tr><td>${new Date(e.time).toLocaleTimeString()}</td><td>${e.kind === "oom" ? "OOM kill" : e.reason === "oom" ? "OOM bump" : "adjustment"}</td>` +
        `<td>${esc(keyStr(e.key))}</td><td>${esc(e.pod)}</td><td>${esc(e.node)}</td><td>${esc(change)}</td></tr>`;
    }).join("") + `</table>`;
}

// Rescheduling: moves per hour (stacked by outcome), failures and refusals
// by reason, the daily reports, the queue and the latest moves.
const OUTCOMES = [["moved", C.ok, "moved"], ["failed", C.warn, "failed"], ["denied", C.grey, "refused"], ["pending", C.line, "pending"]];
function reschedule(r) {
  document.getElementById("reschedule-card").hidden = r === null;  // a cluster view: not for one namespace's reader
  if (r === null) return;
  if (!r.enabled) {
    document.getElementById("reschedule-settings").textContent = "off (the aggregator's --reschedule)";
    for (const id of ["reschedule-tiles", "reschedule-hourly", "reschedule-failures", "reschedule-days", "reschedule-queue"]) document.getElementById(id).textContent = "";
    document.getElementById("reschedule-hourly").innerHTML = `<div class="empty">rescheduling is off</div>`;
    return;
  }
  const s = r.settings, d = r.last24h;
  document.getElementById("reschedule-settings").textContent =
    `7-day peaks under ${pct(s.cpuWatermark)} CPU / ${pct(s.memoryWatermark)} memory · emergency above ${pct(s.emergencyWatermark)} CPU · ` +
    `at most ${s.perNode}/node, ${s.perWorkload}/workload, ${s.perHour} an hour${s.hours ? " · hours " + s.hours + " UTC" : ""}`;
  const rate = d.successRate < 0 ? "–" : pct(d.successRate);
  document.getElementById("reschedule-tiles").innerHTML = `<b>${r.queue.length}</b> nodes queued · last 24 h: <b>${d.moved}</b> moved, ` +
    `<b>${d.failed + d.unresolved}</b> failed, <b>${d.denied}</b> refused, success rate <b>${rate}</b>`;
  const hours = r.hourly || [];
  const W = 1080, H = 120, L = 30, B = 18;
  const sv = svg(document.getElementById("reschedule-hourly"), W, H);
  const max = Math.max(1, ...hours.map(h => h.moved + h.failed + h.denied + h.pending));
  const bw = (W - L) / Math.max(hours.length, 1);
  text(sv, 0, 12, String(max));
  text(sv, 0, H - B, "0");
  hours.forEach((h, i) => {
    let y = H - B;
    for (const [k, color, label] of OUTCOMES) {
      const v = h[k];
      if (!v) continue;
      const hh = ((H - B - 8) * v) / max;
      y -= hh;
      el("rect", { x: L + i * bw + 1, y, width: Math.max(bw - 2, 1), height: hh, fill: color, "data-series": k }, sv)
        .appendChild(document.createElementNS(NS, "title")).textContent = `${new Date(h.hour).toISOString().slice(11, 16)} UTC: ${v} ${label}`;
    }
    if (i % 3 === 0) text(sv, L + i * bw, H - 4, new Date(h.hour).toISOString().slice(11, 16));
  });
  OUTCOMES.forEach(([, color, label], i) => { el("rect", { x: W - 330 + i * 80, y: 4, width: 10, height: 10, fill: color }, sv); text(sv, W - 316 + i * 80, 13, label); });
  const reasons = Object.entries(d.failures || {}).map(([k, n]) => ["failed", k, n]).concat(Object.entries(d.denials || {}).map(([k, n]) => ["refused", k, n]))
    .sort((a, b) => b[2] - a[2]);
  document.getElementById("reschedule-failures").innerHTML = reasons.length === 0 ? `<div class="empty">none</div>` :
    `<table><tr><th>what</th><th>reason</th><th>moves</th></tr>` + reasons.map(([w, k, n]) => `<tr><td>${w}</td><td>${esc(k)}</td><td>${n}</td></tr>`).join("") + `</table>`;
  document.getElementById("reschedule-days").innerHTML = `<table><tr><th>day</th><th>asked</th><th>moved</th><th>failed</th><th>refused</th><th>success</th></tr>` +
    (r.days || []).map(x => `<tr><td>${esc(x.day)}</td><td>${x.asked}</td><td>${x.moved}</td><td class="${x.failed + x.unresolved ? "bad" : ""}">${x.failed + x.unresolved}</td>` +
      `<td>${x.denied}</td><td>${x.successRate < 0 ? "–" : pct(x.successRate)}</td></tr>`).join("") + `</table>`;
  const rows = (r.queue || []).slice(0, 8).map(q => `<tr><td>queued</td><td>${esc(q.node)}</td><td>${esc(q.reason)}</td>` +
    `<td>${cores(q.cpu)} · ${bytes(q.memory)} to move</td><td>since ${new Date(q.since).toLocaleTimeString()}</td></tr>`)
    .concat((r.recent || []).slice(0, 10).map(m => `<tr><td>${esc(m.state)}</td><td>${esc(m.namespace + "/" + m.pod)}</td><td>${esc(m.reason || "")}</td>` +
      `<td>${esc(m.node)}${m.to ? " → " + esc(m.to) : ""}</td><td class="${m.state === "moved" ? "good" : m.state === "admitted" || m.state === "evicted" ? "" : "bad"}">` +
      `${esc(m.detail || new Date(m.time).toLocaleTimeString())}${m.repeats ? ` (×${m.repeats + 1})` : ""}</td></tr>`));
  document.getElementById("reschedule-queue").innerHTML = rows.length === 0 ? `<div class="empty">nothing queued, no move yet</div>` : `<table>${rows.join("")}</table>`;
}

async function refresh() {
  try {
    const access = await get("/api/v1/access");
    document.getElementById("whoami").textContent = `signed in as ${access.user}` + (access.cluster ? " (cluster)" : "");
    if (!access.cluster && !session.namespace) { showLogin(`${access.user} may not read every namespace: name the one to show`); return; }
    scope = access.cluster ? "" : session.namespace;
    const sel = document.getElementById("ns");
    const ns = scope || sel.value;
    const sat = scope ? get("/api/v1/saturation") : get("/api/v1/saturation?namespace=" + encodeURIComponent(ns));
    const [sum, cap, satv, hn, an, hist, rs] = await Promise.all([get("/api/v1/summary"), get("/api/v1/capacity"), sat,
      scope ? null : get("/api/v1/hotnodes"), get("/api/v1/anomalies?limit=20"), get("/api/v1/history?limit=12"),
      scope ? null : get("/api/v1/reschedule?limit=20")]);
    tiles(sum); coverage(sum.coverage); released(cap); saturation(satv); hot(hn); anomalies(an); historyTable(hist); reschedule(rs);
    if (scope) sel.hidden = true;
    document.getElementById("login").hidden = true;
    delete document.body.dataset.login;
    document.body.dataset.ready = "1";
    delete document.body.dataset.error;
  } catch (e) {
    document.body.dataset.error = String(e);
    if (e.status === 401) showLogin(session.token ? "the token was not accepted: " + e.message : "");
    else if (e.status === 403) showLogin(e.message);
  }
}
document.getElementById("ns").addEventListener("change", refresh);
document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault();
  session.token = document.getElementById("token").value.trim();
  session.namespace = document.getElementById("login-ns").value.trim();
  document.getElementById("token").value = "";
  refresh();
});
document.getElementById("logout").addEventListener("click", ev => {
  ev.preventDefault();
  session.token = ""; session.namespace = "";
  showLogin("");
});
refresh();
setInterval(refresh, 30000);
