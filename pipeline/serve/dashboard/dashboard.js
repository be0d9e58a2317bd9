// preagg dashboard: plain JavaScript over this server's /api (no build step, no outside files).
// Every text from the data (sites, pages, property values) goes through textContent, never HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const params = new URLSearchParams(location.search);
// ?refresh=N seconds, clamped to 1..3600: Infinity, NaN or 0 would poll the API in a tight loop.
const REFRESH_MS = 1000 * refreshSeconds(params.get("refresh"));
function refreshSeconds(text) {
  const n = Number(text);
  return Number.isFinite(n) && n > 0 ? Math.min(3600, Math.max(1, n)) : 5;
}
const state = { site: params.get("site"), zone: "UTC", page: null, month: null, timer: null, ticks: 0 };
let token = sessionStorage.getItem("preagg-token") || "";
if (location.hash.startsWith("#token=")) {
  token = decodeURIComponent(location.hash.slice(7));
  sessionStorage.setItem("preagg-token", token);
  history.replaceState(null, "", location.pathname + location.search);
}

const $ = (id) => document.getElementById(id);
const pad2 = (n) => String(n).padStart(2, "0");

class Unauthorized extends Error {}

async function api(path, query) {
  const url = path + "?" + new URLSearchParams(Object.entries(query).filter(([, v]) => v != null && v !== ""));
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const res = await fetch(url, { headers });
  if (res.status === 401) throw new Unauthorized();
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function status(text, isError) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", Boolean(isError));
}

// -- months (the site's calendar) --------------------------------------------------
// The API takes dates and times without offset as the site's local ones and answers
// each bucket with its local time and offset: the page only needs "this month" there.

function thisMonth() {
  const parts = new Intl.DateTimeFormat("en-CA", { timeZone: state.zone, year: "numeric", month: "2-digit" })
    .formatToParts(new Date());
  const get = (type) => Number(parts.find((p) => p.type === type).value);
  return { y: get("year"), m: get("month") };
}
function shiftMonth(mo, by) {
  const d = new Date(Date.UTC(mo.y, mo.m - 1 + by, 1));
  return { y: d.getUTCFullYear(), m: d.getUTCMonth() + 1 };
}
function monthDays(mo) {
  const last = new Date(Date.UTC(mo.y, mo.m, 0)).getUTCDate();
  const first = `${mo.y}-${pad2(mo.m)}-01`;
  return { first, last: `${mo.y}-${pad2(mo.m)}-${pad2(last)}` };
}
function monthName(mo) {
  return new Date(Date.UTC(mo.y, mo.m - 1, 1)).toLocaleString("en", { month: "long", year: "numeric", timeZone: "UTC" });
}

// -- charts -------------------------------------------------------------------

function drawBars(svg, rows, label) {
  const W = 720, H = 180, top = 8;
  const max = Math.max(1, ...rows.map((r) => r.hits));
  const w = W / Math.max(rows.length, 1);
  const gap = w > 6 ? 1 : 0;
  svg.replaceChildren();
  for (const f of [0.5, 1]) {
    const line = document.createElementNS(SVG, "line");
    const y = String(H - f * (H - top));
    line.setAttribute("x1", "0"); line.setAttribute("x2", String(W));
    line.setAttribute("y1", y); line.setAttribute("y2", y);
    svg.append(line);
  }
  let total = 0;
  rows.forEach((r, i) => {
    total += r.hits;
    if (r.pruned) {  // a bucket past the site's retention: shaded, its zero is not a zero
      const shade = document.createElementNS(SVG, "rect");
      shade.setAttribute("x", String(i * w)); shade.setAttribute("y", "0");
      shade.setAttribute("width", String(w)); shade.setAttribute("height", String(H));
      shade.setAttribute("class", "pruned");
      const why = document.createElementNS(SVG, "title");
      why.textContent = `${label(r.t)}: past the site's retention (pruned)`;
      shade.append(why);
      svg.append(shade);
    }
    const h = (r.hits / max) * (H - top);
    const rect = document.createElementNS(SVG, "rect");
    rect.setAttribute("x", String(i * w + gap / 2));
    rect.setAttribute("y", String(H - h));
    rect.setAttribute("width", String(Math.max(w - gap, 0.5)));
    rect.setAttribute("height", String(h));
    rect.dataset.t = r.t;
    rect.dataset.n = String(r.hits);
    const title = document.createElementNS(SVG, "title");
    title.textContent = `${label(r.t)}: ${r.hits} hits`;
    rect.append(title);
    svg.append(rect);
  });
  svg.dataset.total = String(total);
  svg.dataset.points = String(rows.length);
  svg.dataset.renders = String(Number(svg.dataset.renders || 0) + 1);
  if (window.preaggFirstChart === undefined) window.preaggFirstChart = performance.now();
  return { total, max };
}

const minuteLabel = (t) => t.slice(11, 16);
const dayLabel = (t) => t.slice(0, 10);

function showZone() {
  for (const el of document.querySelectorAll(".zone")) el.textContent = state.zone;
}

// -- cards --------------------------------------------------------------------

async function loadRealtime() {
  const rows = await api("/api/hits", { site: state.site, page: state.page, from: "now-59m", to: "now", by: "minute" });
  const { total, max } = drawBars($("rt-chart"), rows, minuteLabel);
  $("rt-total").textContent = total.toLocaleString("en");
  $("rt-first").textContent = rows.length ? `${minuteLabel(rows[0].t)} ${state.zone}` : "";
  $("rt-last").textContent = rows.length ? `${minuteLabel(rows[rows.length - 1].t)} · peak ${max}/min` : "";
}

async function loadMonth() {
  const { first, last } = monthDays(state.month);
  const rows = await api("/api/hits", {
    site: state.site, page: state.page, from: first, to: last + "T23:59:59", by: "day",
  });
  const { total, max } = drawBars($("month-chart"), rows, dayLabel);
  $("month-label").textContent = monthName(state.month);
  $("month-total").textContent = total.toLocaleString("en");
  $("month-first").textContent = first;
  $("month-last").textContent = `${last} · peak ${max}/day`;
  $("next").disabled = first >= monthDays(thisMonth()).first;
}

async function loadPages() {
  const { first, last } = monthDays(state.month);
  const rows = await api("/api/pages", { site: state.site, from: first, to: last, limit: 10 });
  $("pages-range").textContent = monthName(state.month);
  const body = $("pages-table").tBodies[0];
  body.replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    const page = document.createElement("td");
    const n = document.createElement("td");
    page.textContent = r.page;
    n.textContent = r.hits.toLocaleString("en");
    n.className = "n";
    tr.append(page, n);
    tr.dataset.page = r.page;
    tr.classList.toggle("picked", r.page === state.page);
    tr.addEventListener("click", () => pickPage(r.page === state.page ? null : r.page));
    return tr;
  }));
}

async function loadProps() {
  const { first, last } = monthDays(state.month);
  const rows = await api("/api/props", { site: state.site, page: state.page, from: first, to: last });
  $("props-scope").textContent = `${state.page || "all pages"} · ${monthName(state.month)}`;
  $("props-table").tBodies[0].replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    for (const [text, cls] of [[r.name, ""], [r.value, ""], [r.count.toLocaleString("en"), "n"]]) {
      const td = document.createElement("td");
      td.textContent = text;
      td.className = cls;
      tr.append(td);
    }
    return tr;
  }));
}

// -- flow ---------------------------------------------------------------------

async function run(...loads) {
  try {
    await Promise.all(loads.map((f) => f()));
    const now = new Date().toLocaleTimeString("en-GB", { timeZone: state.zone, hour12: false });
    status(`updated ${now} ${state.zone}`);
  } catch (err) {
    if (err instanceof Unauthorized) {
      clearInterval(state.timer);
      $("token-form").hidden = false;
      status("token needed", true);
    } else {
      status(String(err.message || err), true);
    }
  }
}

// The two charts first, then the tables: a site's property counts over a month read
// every daily document of it, and would hold the charts back behind them.
async function refreshAll() {
  await run(loadRealtime, loadMonth);
  await run(loadPages, loadProps);
}

function pickPage(page) {
  state.page = page;
  $("scope").textContent = page || "all pages";
  $("all-pages").hidden = !page;
  refreshAll();
}

function startPolling() {
  clearInterval(state.timer);
  state.timer = setInterval(() => {
    state.ticks += 1;
    // The live chart every tick; the month, pages and properties every sixth while on this month.
    const current = monthDays(state.month).first === monthDays(thisMonth()).first;
    run(loadRealtime, ...(current && state.ticks % 6 === 0 ? [loadMonth, loadPages, loadProps] : []));
  }, REFRESH_MS);
}

async function start() {
  let sites;
  try {
    sites = await api("/api/sites", {});
  } catch (err) {
    if (err instanceof Unauthorized) {
      $("token-form").hidden = false;
      status("token needed", true);
    } else {
      status(String(err.message || err), true);
    }
    return;
  }
  const select = $("site");
  select.replaceChildren(...sites.map(({ site }) => {
    const opt = document.createElement("option");
    opt.value = site;
    opt.textContent = site;
    return opt;
  }));
  if (!sites.length) {
    status("no hits stored yet");
    return;
  }
  if (!state.site || !sites.some((s) => s.site === state.site)) state.site = sites[0].site;
  select.value = state.site;
  state.zones = Object.fromEntries(sites.map((s) => [s.site, s.zone || "UTC"]));
  state.zone = state.zones[state.site];
  showZone();
  state.month = thisMonth();
  await refreshAll();
  startPolling();
}

$("site").addEventListener("change", (e) => {
  state.site = e.target.value;
  state.zone = state.zones[state.site] || "UTC";
  showZone();
  state.month = thisMonth();
  const url = new URL(location.href);
  url.searchParams.set("site", state.site);
  history.replaceState(null, "", url);
  pickPage(null);
});
$("all-pages").addEventListener("click", () => pickPage(null));
function showMonth(by) {
  state.month = shiftMonth(state.month, by);
  run(loadMonth).then(() => run(loadPages, loadProps));
}
$("prev").addEventListener("click", () => showMonth(-1));
$("next").addEventListener("click", () => showMonth(1));
$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("preagg-token", token);
  $("token-form").hidden = true;
  start();
});
start();
