// The dashboard's script (package internal/dashboard): it follows the
// server's snapshots, by server-sent events or, when the server refuses a
// stream, by polling, and redraws the page from each. It sets text, never
// markup: the names shown come from users.
"use strict";

const base = "/.well-known/stampede/dashboard";
const span = 60e3; // the chart's width, in milliseconds
const history = new Map(); // a charted figure's id: its [time, value] points
let updates = 0;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// fmt prints v in unit as Format does in dashboard.go.
function fmt(v, unit) {
  if (unit !== "bytes") return String(Math.round(v));
  if (Math.abs(v) < 1024) return Math.round(v) + " B";
  let i = 0;
  for (; Math.abs(v) >= 1024 && i < 5; i++) v /= 1024;
  return (Math.round(v * 10) / 10).toFixed(1) + " " + "KMGTPE"[i - 1] + "iB";
}

const pct = (v) => (Math.round(1000 * v) / 10).toFixed(1);
const shown = (f) => (f.counter ? f.rate ?? 0 : f.value);

function figure(f) {
  const d = el("div", "figure");
  d.dataset.id = f.id;
  d.dataset.value = f.value;
  d.append(el("div", "label", f.label), el("div", "value", fmt(f.value, f.unit)));
  if (f.counter) d.append(el("div", "rate", f.rate == null ? "–" : fmt(f.rate, f.unit) + "/s"));
  if (f.max) {
    const m = el("meter");
    m.max = f.max;
    m.value = shown(f);
    d.append(m, el("div", "max", "of " + fmt(f.max, f.unit) + (f.counter ? "/s" : "")));
  }
  return d;
}

function cell(v, unit) {
  const td = el("td", unit === "text" ? "" : "n");
  if (unit === "progress" && v != null) {
    const p = el("progress");
    p.max = 1;
    p.value = v;
    td.append(p, " " + pct(v) + "%");
  } else {
    td.textContent = v == null ? "–" : typeof v === "string" ? v : fmt(v, unit);
  }
  return td;
}

function table(t) {
  const out = [el("h2", "", t.title)];
  if (t.rows && t.rows.length) {
    const head = el("tr");
    for (const c of t.columns) head.append(el("th", c.unit === "text" ? "" : "n", c.name));
    const body = el("tbody");
    for (const row of t.rows) {
      const tr = el("tr");
      row.forEach((v, i) => tr.append(cell(v, t.columns[i].unit)));
      body.append(tr);
    }
    const thead = el("thead");
    thead.append(head);
    const tab = el("table");
    tab.append(thead, body);
    out.push(tab);
  } else {
    out.push(el("p", "empty", t.empty || ""));
  }
  if (t.note) out.push(el("p", "note", t.note));
  return out;
}

// record adds the snapshot's charted values, a counter's rate, to the history.
function record(s) {
  const now = Date.parse(s.time);
  for (const f of s.figures) {
    const v = f.counter ? f.rate : f.value;
    if (!f.chart || v == null) continue;
    const h = history.get(f.id) || [];
    h.push([now, v]);
    while (h[0][0] < now - span) h.shift();
    history.set(f.id, h);
  }
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// draw plots the history of the charted figures, on one scale from 0 to
// their highest value or cap, the newest point on the right.
function draw(s) {
  const figs = s.figures.filter((f) => f.chart);
  document.getElementById("chart").hidden = figs.length === 0;
  if (!figs.length) return;
  const W = 600, H = 160, now = Date.parse(s.time);
  let top = 0;
  for (const f of figs) {
    top = Math.max(top, f.max || 0, ...(history.get(f.id) || []).map((p) => p[1]));
  }
  top = top > 0 ? top * 1.1 : 1;
  const x = (t) => (W - ((now - t) / span) * W).toFixed(1);
  const y = (v) => (H - (v / top) * H).toFixed(1);
  const lines = [];
  figs.forEach((f, i) => {
    const pts = (history.get(f.id) || []).map(([t, v]) => x(t) + "," + y(v));
    lines.push(svg("polyline", { class: "s" + (i % 4), points: pts.join(" "), "data-id": f.id, "data-points": pts.length }));
    if (f.max) lines.push(svg("line", { class: "cap s" + (i % 4), x1: 0, x2: W, y1: y(f.max), y2: y(f.max) }));
  });
  document.getElementById("plot").replaceChildren(...lines);
  const rate = figs.some((f) => f.counter) ? "/s" : "";
  document.getElementById("top").textContent = "top " + fmt(top, figs[0].unit) + rate;
  document.getElementById("legend").replaceChildren(
    ...figs.map((f, i) => el("li", "s" + (i % 4), f.label + (f.max ? ", cap dashed" : ""))));
}

function render(s) {
  document.title = s.title;
  document.querySelector("h1").textContent = s.title;
  document.getElementById("notes").replaceChildren(...(s.notes || []).map((n) => el("p", "", n)));
  document.getElementById("figures").replaceChildren(...s.figures.map(figure));
  record(s);
  draw(s);
  document.getElementById("tables").replaceChildren(...s.tables.flatMap(table));
  const live = document.getElementById("live");
  live.textContent = "live, " + new Date(s.time).toLocaleTimeString();
  live.classList.remove("down");
  live.dataset.updates = ++updates;
  live.dataset.time = s.time;
}

function fail(why) {
  const live = document.getElementById("live");
  live.textContent = "not live: " + why;
  live.classList.add("down");
}

function poll() {
  fetch(base + "/snapshot", { cache: "no-store" })
    .then((r) => (r.ok ? r.json() : Promise.reject(new Error(r.status + " " + r.statusText))))
    .then(render, (err) => fail(err.message))
    .finally(() => setTimeout(poll, 2000));
}

// follow takes the stream, and polls once it is refused (too many streams,
// or no stream where the server stands behind something that buffers).
function follow() {
  const es = new EventSource(base + "/events");
  es.onmessage = (e) => render(JSON.parse(e.data));
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) poll();
    else fail("reconnecting");
  };
}

if (window.EventSource) follow();
else poll();
