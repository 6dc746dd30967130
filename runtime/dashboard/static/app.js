// troupe dashboard: polls api/state and draws nodes, actors and GPU
// utilization over time on canvases. Hand-written, no dependencies.
"use strict";

const PALETTE = ["#5ccfe6", "#ffb454", "#7fd962", "#f07178", "#c792ea", "#ffd580",
  "#73d0ff", "#d4bfff", "#95e6cb", "#f29e74", "#bae67e", "#ff8f40"];
const WINDOW_MS = 120000; // time span shown by the charts

function $(id) { return document.getElementById(id); }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function gib(b) { return (b / 1073741824).toFixed(1); }
function pct(v) { return v === null || v === undefined ? "n/a" : v + "%"; }
function gpuKey(g) { return g.node + "/" + g.index; }

// Canvas with device-pixel-ratio scaling; returns the 2D context and size.
function prepCanvas(c) {
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth || 300, h = c.clientHeight || 64;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
  }
  const ctx = c.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return { ctx, w, h };
}

// drawChart plots series [{points: [{t, v}], color, fill}] over
// [now-WINDOW_MS, now] with a 0-100 % y axis.
function drawChart(canvas, series, now, opts) {
  const { ctx, w, h } = prepCanvas(canvas);
  const axes = opts && opts.axes;
  const padL = axes ? 38 : 2, padR = 6, padT = 6, padB = axes ? 20 : 2;
  const pw = w - padL - padR, ph = h - padT - padB;
  const t0 = now - WINDOW_MS;
  const x = t => padL + (t - t0) / WINDOW_MS * pw;
  const y = v => padT + ph - v / 100 * ph;
  ctx.strokeStyle = "#2a3642";
  ctx.fillStyle = "#8a98a8";
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (const v of [0, 25, 50, 75, 100]) {
    ctx.beginPath();
    ctx.moveTo(padL, Math.round(y(v)) + 0.5);
    ctx.lineTo(w - padR, Math.round(y(v)) + 0.5);
    ctx.stroke();
    if (axes) ctx.fillText(v + "%", 4, y(v) + 4);
  }
  if (axes) {
    for (let s = 0; s <= WINDOW_MS / 1000; s += 30) {
      const tx = x(now - s * 1000);
      ctx.fillText(s === 0 ? "now" : "-" + s + "s", tx - (s === 0 ? 22 : 12), h - 5);
    }
  }
  for (const s of series) {
    const pts = s.points.filter(p => p.v !== null && p.v !== undefined && p.t >= t0 - 2000);
    if (pts.length === 0) continue;
    ctx.beginPath();
    pts.forEach((p, i) => {
      const px = Math.max(padL, x(p.t));
      if (i === 0) ctx.moveTo(px, y(p.v)); else ctx.lineTo(px, y(p.v));
    });
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.width || 1.5;
    ctx.stroke();
    if (s.fill) {
      ctx.lineTo(Math.max(padL, x(pts[pts.length - 1].t)), y(0));
      ctx.lineTo(Math.max(padL, x(pts[0].t)), y(0));
      ctx.closePath();
      ctx.fillStyle = s.fill;
      ctx.fill();
    }
  }
}

function renderSummary(st) {
  const sim = st.nodes.filter(n => n.simulated_gpus).map(n => n.simulated_gpus);
  let s = st.nodes.length + " node(s) · " + st.actors.length + " actor(s) · " + st.gpus.length + " GPU(s)";
  if (sim.length) s += " · SIMULATED GPUs (" + Array.from(new Set(sim)).join(", ") + ")";
  $("summary").textContent = s;
  $("clock").textContent = new Date(st.time).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function renderNodes(st, now) {
  const box = $("nodes");
  box.textContent = "";
  for (const n of st.nodes) {
    const c = el("div", "card node");
    c.dataset.node = n.name;
    const title = el("div");
    title.appendChild(el("b", "", n.name));
    if (n.leader) title.appendChild(el("span", "badge", " leader"));
    c.appendChild(title);
    c.appendChild(el("div", n.alive ? "state-alive" : "state-dead", n.alive ? "alive" : "dead"));
    let gp = n.gpus + " GPU(s)";
    if (n.simulated_gpus) gp += " — simulated " + n.simulated_gpus;
    c.appendChild(el("div", "", n.cpus + " CPU(s) · " + gp));
    const mine = st.gpus.filter(g => g.node === n.name);
    if (mine.length > 0) {
      const avg = nodeAverage(mine);
      const last = avg.length ? avg[avg.length - 1].v : null;
      c.appendChild(el("div", "node-util", "GPU SM avg " + (last === null ? "n/a" : Math.round(last) + "%")));
      const cv = el("canvas", "spark node-spark");
      c.appendChild(cv);
      box.appendChild(c);
      drawChart(cv, [{ points: avg, color: "#5ccfe6", fill: "#5ccfe633", width: 1.5 }], now);
      continue;
    }
    box.appendChild(c);
  }
}

// nodeAverage is the mean SM utilization over a node's GPUs per second
// (the GPUs of one node are sampled together, a few microseconds apart).
function nodeAverage(gpus) {
  const sums = new Map();
  for (const g of gpus) {
    for (const p of g.history) {
      if (p.sm === null || p.sm === undefined) continue;
      const k = Math.round(p.t / 1000) * 1000;
      const e = sums.get(k) || { s: 0, n: 0 };
      e.s += p.sm;
      e.n++;
      sums.set(k, e);
    }
  }
  return Array.from(sums.entries()).sort((a, b) => a[0] - b[0]).map(([t, e]) => ({ t, v: e.s / e.n }));
}

function renderActors(st) {
  const body = $("actors").tBodies[0];
  body.textContent = "";
  if (st.actors.length === 0) {
    const tr = el("tr");
    const td = el("td", "empty", "No actors.");
    td.colSpan = 6;
    tr.appendChild(td);
    body.appendChild(tr);
    return;
  }
  for (const a of st.actors) {
    const tr = el("tr");
    tr.dataset.actor = a.name;
    for (const v of [a.name, a.type || "", a.job || "", a.node, a.state, (a.gpus || []).join(", ")]) {
      tr.appendChild(el("td", "", v));
    }
    tr.children[4].className = "state-" + a.state;
    body.appendChild(tr);
  }
}

// gpuCard returns the card of GPU g, creating it on first sight.
function gpuCard(g, box) {
  const id = "gpu-" + gpuKey(g).replace(/[^A-Za-z0-9_-]/g, "_");
  let c = document.getElementById(id);
  if (c) return c;
  c = el("div", "gpu");
  c.id = id;
  c.dataset.gpu = gpuKey(g);
  const head = el("div", "gpu-head");
  head.appendChild(el("span", "gpu-title", (st_nodes > 1 ? g.node + " · " : "") + "GPU " + g.index));
  head.appendChild(el("span", "gpu-name", g.name));
  if (g.simulated) head.appendChild(el("span", "badge sim", "SIMULATED"));
  c.appendChild(head);
  const util = el("div", "gpu-util");
  util.appendChild(el("span", "big sm", ""));
  util.appendChild(el("span", "mem", ""));
  c.appendChild(util);
  const cv = el("canvas", "spark");
  c.appendChild(cv);
  const stats = el("div", "gpu-stats");
  c.appendChild(stats);
  c.appendChild(el("div", "gpu-actors"));
  box.appendChild(c);
  return c;
}

let st_nodes = 1;

function renderGPUs(st, now) {
  const box = $("gpus");
  if (st.gpus.length === 0) {
    box.innerHTML = '<p class="empty">No GPUs.</p>';
    return;
  }
  const empty = box.querySelector(".empty");
  if (empty) empty.remove();
  st_nodes = st.nodes.length;
  const seen = new Set();
  st.gpus.forEach((g, i) => {
    const c = gpuCard(g, box);
    seen.add(c.id);
    const color = PALETTE[i % PALETTE.length];
    c.querySelector(".sm").textContent = pct(g.sm_util_percent);
    c.querySelector(".mem").textContent = " SM · mem " + pct(g.mem_util_percent);
    const stats = c.querySelector(".gpu-stats");
    stats.textContent = "";
    if (g.memory_total_bytes) {
      const used = g.memory_used_bytes || 0;
      stats.appendChild(el("div", "", "memory " + gib(used) + " / " + gib(g.memory_total_bytes) + " GiB"));
      const bar = el("div", "membar");
      const fill = el("div");
      fill.style.width = Math.min(100, 100 * used / g.memory_total_bytes).toFixed(1) + "%";
      bar.appendChild(fill);
      stats.appendChild(bar);
    }
    let line = "";
    if (g.power_watts !== null && g.power_watts !== undefined) {
      line += Math.round(g.power_watts) + (g.power_limit_watts ? " / " + Math.round(g.power_limit_watts) : "") + " W";
    }
    if (g.temperature_celsius !== null && g.temperature_celsius !== undefined) line += " · " + g.temperature_celsius + " °C";
    stats.appendChild(el("div", "", line));
    const act = c.querySelector(".gpu-actors");
    act.textContent = "";
    if (g.actors.length === 0) act.appendChild(el("i", "empty", "no actor"));
    for (const h of g.actors) {
      act.appendChild(el("span", "", h.actor + (h.job ? " (" + h.job + ")" : "") + (h.fraction < 1 ? " " + Math.round(h.fraction * 100) + "%" : "") +
        (h.sm_util_percent !== undefined && h.sm_util_percent !== null ? " · using " + h.sm_util_percent + "%" : "")));
    }
    drawChart(c.querySelector("canvas"), [
      { points: g.history.map(p => ({ t: p.t, v: p.mem })), color: "#8a98a8", width: 1 },
      { points: g.history.map(p => ({ t: p.t, v: p.sm })), color: color, fill: color + "33", width: 1.5 },
    ], now);
  });
  for (const c of Array.from(box.children)) if (!seen.has(c.id)) c.remove();
}

function renderOverall(st, now) {
  const series = st.gpus.map((g, i) => ({
    points: g.history.map(p => ({ t: p.t, v: p.sm })), color: PALETTE[i % PALETTE.length],
  }));
  drawChart($("overall"), series, now, { axes: true });
  const lg = $("legend");
  lg.textContent = "";
  st.gpus.forEach((g, i) => {
    const s = el("span");
    const sw = el("i");
    sw.style.background = PALETTE[i % PALETTE.length];
    s.appendChild(sw);
    s.appendChild(document.createTextNode((st.nodes.length > 1 ? g.node + " " : "") + "GPU " + g.index + " " + pct(g.sm_util_percent)));
    lg.appendChild(s);
  });
}

let last = null;

function render(st) {
  last = st;
  // Charts end at the newest sample so a paused source does not scroll away.
  let now = Date.parse(st.time);
  for (const g of st.gpus) for (const p of g.history) if (p.t > now) now = p.t;
  renderSummary(st);
  renderNodes(st, now);
  renderGPUs(st, now);
  renderOverall(st, now);
}

async function poll() {
  let delay = 1000;
  try {
    const r = await fetch("api/state", { cache: "no-store" });
    const st = await r.json();
    if (!r.ok) throw new Error(st.error || r.statusText);
    render(st);
    renderActors(st);
    delay = st.poll_ms || delay;
    $("status").textContent = "live";
    $("status").className = "status live";
  } catch (e) {
    $("status").textContent = "error: " + e.message;
    $("status").className = "status error";
  }
  setTimeout(poll, delay);
}

// The training timeline (api/training, when the dashboard was given a run
// directory): per actor, the seconds of each step in every phase, stacked.
const PHASES = [["rollout", "#5ccfe6"], ["train", "#7fd962"], ["sync", "#ffb454"], ["collective", "#c792ea"], ["idle", "#3a4652"]];
let lastTraining = null;

function drawTimeline(canvas, steps, actor, top) {
  const { ctx, w, h } = prepCanvas(canvas);
  const bw = w / Math.max(steps.length, 1);
  steps.forEach((s, i) => {
    const ph = s.actors[actor];
    if (!ph) return;
    let y = h;
    for (const [name, color] of PHASES) {
      const v = ph[name] || 0;
      const bh = v / top * (h - 2);
      ctx.fillStyle = color;
      ctx.fillRect(i * bw + 0.5, y - bh, Math.max(bw - 1, 1), bh);
      y -= bh;
    }
  });
}

function renderTraining(t) {
  lastTraining = t;
  $("training").hidden = false;
  $("training-run").textContent = "(" + t.run + ", last " + t.steps.length + " steps; seconds per step)";
  const actors = Array.from(new Set(t.steps.flatMap(s => Object.keys(s.actors)))).sort();
  let top = 0;
  for (const s of t.steps) for (const a of actors) {
    const ph = s.actors[a];
    if (ph) top = Math.max(top, PHASES.reduce((x, [n]) => x + (ph[n] || 0), 0));
  }
  const box = $("timeline");
  box.textContent = "";
  for (const a of actors) {
    box.appendChild(el("span", "actor", a));
    const cv = el("canvas");
    box.appendChild(cv);
    const newest = t.steps.slice().reverse().find(s => s.actors[a]);
    const ph = newest ? newest.actors[a] : null;
    const busy = ph && ph.wall > 0 ? Math.round(100 * (ph.wall - (ph.idle || 0)) / ph.wall) + "% busy" : "";
    box.appendChild(el("span", "busy", busy));
    drawTimeline(cv, t.steps, a, top || 1);
  }
  const lg = $("phases");
  lg.textContent = "";
  for (const [name, color] of PHASES) {
    const s = el("span");
    const sw = el("i");
    sw.style.background = color;
    s.appendChild(sw);
    s.appendChild(document.createTextNode(name));
    lg.appendChild(s);
  }
}

async function pollTraining() {
  try {
    const r = await fetch("api/training", { cache: "no-store" });
    if (!(r.headers.get("Content-Type") || "").startsWith("application/json")) return; // no run given: stop
    if (r.ok) renderTraining(await r.json());
  } catch (e) {
    // the state poll reports the connection
  }
  setTimeout(pollTraining, 2000);
}

window.addEventListener("resize", () => { if (last) render(last); if (lastTraining) renderTraining(lastTraining); });
poll();
pollTraining();
