// The shardd status page: polls /api/status and /api/plans every two
// seconds and draws with plain SVG (no library, no network but this
// server's).  Served from the binary (daemon/www/, cmake/embed.cmake).
"use strict";

const NS = "http://www.w3.org/2000/svg";
const rates = []; // [wall ms, samples/s] of the profiler, this page's polls
let lastMeasured = null;
let selectedPlan = null;
let shownPlan = null;

function $(id) { return document.getElementById(id); }
function txt(id, v) { $(id).textContent = v; }
function pct(x) { return (100 * x).toFixed(2) + " %"; }
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + u[i];
}
function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}

// A line plot of series [{name, cls, points: [[x, y]...]}] into svg.
function linePlot(svg, series, w, h, yfmt) {
  clear(svg);
  const pts = series.flatMap(s => s.points);
  if (pts.length === 0) {
    el("text", { x: 10, y: 20, "font-size": 12, fill: "#7a8194" }, svg).textContent =
      "no data yet (stored model versions appear here after a retrain)";
    return;
  }
  const x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
  const y1 = Math.max(...pts.map(p => p[1])) * 1.1 || 1;
  const L = 50, R = 10, T = 10, B = 20;
  const sx = x => L + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (w - L - R);
  const sy = y => T + (1 - y / y1) * (h - T - B);
  el("line", { x1: L, y1: h - B, x2: w - R, y2: h - B, stroke: "#999" }, svg);
  el("line", { x1: L, y1: T, x2: L, y2: h - B, stroke: "#999" }, svg);
  el("text", { x: 2, y: T + 10, "font-size": 10 }, svg).textContent = yfmt(y1);
  el("text", { x: 2, y: h - B, "font-size": 10 }, svg).textContent = yfmt(0);
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    el("polyline", {
      points: s.points.map(p => sx(p[0]) + "," + sy(p[1])).join(" "),
      fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name,
    }, svg);
    s.points.forEach(p => el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: s.color }, svg));
    el("text", { x: w - R - 150, y: T + 12 + 14 * i, fill: s.color, "font-size": 11 }, svg)
      .textContent = s.name;
  });
}

function showStatus(st) {
  txt("version", st.version);
  const h = $("health");
  h.textContent = st.serving ? "SERVING" : "NOT_SERVING";
  h.className = "pill " + (st.serving ? "ok" : "bad");
  txt("uptime", "up " + Math.round((st.now_ms - st.started_ms) / 1000) + " s");
  txt("profile", st.profile ? "profile " + st.profile + " (" + st.backend + ")" : "");
  if (st.model) {
    txt("model-version", st.model.version);
    txt("model-val", pct(st.model.validation_error));
    txt("model-holdout", pct(st.model.holdout_error));
    txt("model-profile", st.model.profile);
  }
  const p = st.profiler;
  txt("profiler-state", p.state);
  txt("profiler-measured", p.measured);
  txt("profiler-samples", p.profile_samples);
  txt("profiler-memory", "keeps " + bytes(p.memory_bytes) + " of " + bytes(p.memory_budget_bytes));
  if (lastMeasured !== null && st.now_ms > lastMeasured[0]) {
    const r = (p.measured - lastMeasured[1]) * 1000 / (st.now_ms - lastMeasured[0]);
    rates.push([st.now_ms, Math.max(r, 0)]);
    if (rates.length > 150) rates.shift();
    txt("profiler-rate", r.toFixed(2) + " samples/s");
  }
  lastMeasured = [st.now_ms, p.measured];
  txt("lanes-inflight", st.lanes.inflight);
  txt("lanes-big", st.lanes.big_running);
  txt("lanes-waiting", st.lanes.big_waiting);
  const c = st.cache, tot = c.hits + c.misses;
  txt("cache", c.entries + " plans, " + (tot ? pct(c.hits / tot) : "–") + " hits");
  txt("memory", "RSS " + bytes(st.rss_bytes) + ", store " + bytes(st.store_bytes));
  if (st.fleet) {
    $("card-fleet").hidden = false;
    txt("fleet-role", st.fleet.role);
    txt("fleet-detail", st.fleet.detail || "");
  }

  const models = st.models.filter(m => m.kind === "compute").slice().reverse();
  linePlot($("error-plot"), [
    { name: "validation error", color: "#4c6ef5",
      points: models.map(m => [m.created_ms, m.validation_error]) },
    { name: "hold-out error", color: "#f08c00",
      points: models.map(m => [m.created_ms, m.holdout_error]) },
  ], 640, 200, pct);
  linePlot($("rate-plot"), [{ name: "samples/s", color: "#37b24d", points: rates }],
    640, 120, v => v.toFixed(1));

  const jb = $("jobs").tBodies[0];
  clear(jb);
  st.jobs.forEach(j => {
    const tr = jb.insertRow();
    tr.dataset.job = j.id;
    tr.insertCell().textContent = j.id;
    tr.insertCell().textContent = j.state;
    const pr = document.createElement("progress");
    pr.max = 1; pr.value = j.progress;
    tr.insertCell().appendChild(pr);
    tr.insertCell().textContent = j.message;
    tr.insertCell().textContent = j.result_model || "";
  });
}

function showPlans(list) {
  const tb = $("plans").tBodies[0];
  clear(tb);
  list.plans.forEach(p => {
    const tr = tb.insertRow();
    tr.dataset.plan = p.id;
    if (p.id === selectedPlan) tr.className = "sel";
    [p.id, new Date(p.created_ms).toLocaleTimeString(), p.algorithm, p.tables,
     p.devices, p.plan_cost_ms.toFixed(3), p.model || "embedded"]
      .forEach(v => { tr.insertCell().textContent = v; });
    tr.onclick = () => { selectedPlan = p.id; shownPlan = null; refresh(); };
  });
  if (selectedPlan === null && list.plans.length > 0) selectedPlan = list.plans[0].id;
}

// Per device: a stacked bar of compute, backward comm, the wait and the
// forward comm, and a memory bar; the critical device outlined in red.
function drawPlan(p) {
  shownPlan = p.id;
  $("plan-detail").hidden = false;
  txt("plan-id", p.id);
  txt("plan-cost", p.plan_cost_ms.toFixed(3));
  txt("plan-critical", p.critical_device);
  const svg = $("plan-svg");
  clear(svg);
  const rowH = 34, L = 70, W = 720, memW = 150, gap = 20;
  const barW = W - L - memW - gap - 10;
  const H = 20 + rowH * p.bars.length;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  const defs = el("defs", {}, svg);
  const pat = el("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)" }, defs);
  el("rect", { width: 6, height: 6, fill: "#fff" }, pat);
  el("rect", { width: 3, height: 6, fill: "#ced4da" }, pat);
  const tmax = Math.max(...p.bars.map(b => b.total_ms)) || 1;
  const mmax = Math.max(...p.bars.map(b => b.memory_bytes)) || 1;
  el("text", { x: L, y: 12, "font-size": 10 }, svg).textContent = "0 ms";
  el("text", { x: L + barW - 60, y: 12, "font-size": 10 }, svg).textContent = tmax.toFixed(2) + " ms";
  el("text", { x: L + barW + gap, y: 12, "font-size": 10 }, svg).textContent = "memory (max " + bytes(mmax) + ")";
  p.bars.forEach((b, i) => {
    const y = 18 + i * rowH, g = el("g", { "data-device": b.device }, svg);
    const crit = b.device === p.critical_device;
    el("text", { x: 4, y: y + 18, "font-size": 12, "font-weight": crit ? 700 : 400,
      fill: crit ? "#e03131" : "#1d2330" }, g).textContent = "dev " + b.device + (crit ? " ◆" : "");
    let x = L;
    [["compute", b.compute_ms], ["bwd", b.bwd_comm_ms], ["wait", b.wait_ms], ["fwd", b.fwd_comm_ms]]
      .forEach(([cls, ms]) => {
        const w = ms / tmax * barW;
        const r = el("rect", { x: x, y: y, width: Math.max(w, 0), height: rowH - 10,
          class: cls, "data-part": cls, "data-ms": ms }, g);
        el("title", {}, r).textContent = cls + " " + ms.toFixed(3) + " ms";
        x += w;
      });
    if (crit) el("rect", { x: L, y: y, width: x - L, height: rowH - 10, fill: "none",
      class: "critical", "data-critical": "1" }, g);
    el("rect", { x: L + barW + gap, y: y, width: memW, height: rowH - 10, fill: "#eee" }, g);
    el("rect", { x: L + barW + gap, y: y, width: b.memory_bytes / mmax * memW, height: rowH - 10,
      class: "mem", "data-part": "mem" }, g);
  });
}

async function refresh() {
  try {
    showStatus(await getJSON("/api/status"));
    showPlans(await getJSON("/api/plans?limit=20"));
    if (selectedPlan !== null && shownPlan !== selectedPlan)
      drawPlan(await getJSON("/api/plans/" + selectedPlan));
    $("error").hidden = true;
    document.body.dataset.loaded = "1";
  } catch (e) {
    $("error").hidden = false;
    txt("error", String(e));
  }
}

refresh();
setInterval(refresh, 2000);
