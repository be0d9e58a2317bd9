// preagg dashboard: plain JavaScript over this server's /api (no build step, no outside files).
// Every text from the data (sites, pages, property values) goes through textContent, never HTML.
// The view (site, page, range, filters) lives in the address, so a view is a link to share.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let params = new URLSearchParams(location.search);
// ?refresh=N seconds, clamped to 1..3600: Infinity, NaN or 0 would poll the API in a tight loop.
const REFRESH_MS = 1000 * refreshSeconds(params.get("refresh"));
function refreshSeconds(text) {
  const n = Number(text);
  return Number.isFinite(n) && n > 0 ? Math.min(3600, Math.max(1, n)) : 5;
}
// The API's bounds, read from its OpenAPI document at start (x-preagg-limits and each parameter's
// maximum: pipeline/kinds/hits/queries.py declares them once): longer ranges are narrowed, and said so.
let MAX_PAGE_DAYS = 366, MAX_PROP_DAYS = 93, MAX_DAY_BARS = 1100, MAX_PAGES = 1000, MAX_VISIT_DAYS = 1100;

async function readLimits() {
  try {
    const res = await fetch("/openapi.json");
    if (!res.ok) return;
    const paths = (await res.json()).paths || {};
    const op = (path) => (paths[path] || {}).get || {};
    const limits = (path) => op(path)["x-preagg-limits"] || {};
    const max = (path, name) => ((op(path).parameters || []).find((p) => p.name === name) || { schema: {} }).schema.maximum;
    MAX_PAGE_DAYS = limits("/api/pages").max_days || MAX_PAGE_DAYS;
    MAX_PROP_DAYS = limits("/api/props").max_days || MAX_PROP_DAYS;
    MAX_DAY_BARS = (limits("/api/hits").max_days_by || {}).day || MAX_DAY_BARS;
    MAX_PAGES = max("/api/pages", "limit") || MAX_PAGES;
    MAX_VISIT_DAYS = limits("/api/visits").max_days || MAX_VISIT_DAYS;
  } catch (err) {
    // The document is public and small; if it cannot be read the built-in bounds hold.
  }
}
const PROPS_SHOWN = 10;

const state = {
  site: null, page: null, zone: "UTC", zones: {},
  from: null, to: null, preset: null, bots: false, compare: false, pagesLimit: 10,
  openProps: new Set(), hasBots: false, timer: null, ticks: 0, ends: "entries", hasVisits: false,
};
let token = sessionStorage.getItem("preagg-token") || "";
if (location.hash.startsWith("#token=")) {
  token = decodeURIComponent(location.hash.slice(7));
  sessionStorage.setItem("preagg-token", token);
  history.replaceState(null, "", location.pathname + location.search);
}

const $ = (id) => document.getElementById(id);
const pad2 = (n) => String(n).padStart(2, "0");
const fmt = (n) => n.toLocaleString("en");
/** Seconds as Plausible writes a visit's duration: 45s, 3m 05s, 1h 02m. */
function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad2(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${pad2(Math.floor((s % 3600) / 60))}m`;
}

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

/** Rows and what still waits to be counted (``envelope=true``); shown above the charts. */
async function apiRows(path, query) {
  const body = await api(path, { ...query, envelope: "true" });
  showPending(body.pending);
  return body.rows;
}

function showPending(p) {
  const el = $("pending");
  if (!p || p.complete) { el.hidden = true; el.textContent = ""; return; }
  const n = `${fmt(p.messages)} message${p.messages === 1 ? "" : "s"}`;
  if (p.stalled) {
    const age = p.last_flush_age == null ? "never" : `${fmt(Math.round(p.last_flush_age))} s ago`;
    el.textContent = `Not complete: ${n} wait to be counted and no worker is counting them (last flush ${age}; see preagg status).`;
    el.classList.add("error");
  } else {
    const eta = p.seconds == null ? "" : `, about ${fmt(Math.max(1, Math.round(p.seconds)))} s more`;
    el.textContent = `Still counting: ${n} sent are not in these figures yet${eta}.`;
    el.classList.remove("error");
  }
  el.hidden = false;
}

function status(text, isError) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", Boolean(isError));
}

// -- days (the site's calendar) ---------------------------------------------------
// The API takes dates without offset as the site's local days and answers each bucket
// with its local time and offset: the page only needs "today" there. Days are
// YYYY-MM-DD strings; arithmetic is on UTC midnights, which have no DST.

const dayDate = (s) => new Date(s + "T00:00:00Z");
const dayText = (d) => d.toISOString().slice(0, 10);
const addDays = (s, n) => { const d = dayDate(s); d.setUTCDate(d.getUTCDate() + n); return dayText(d); };
const daysBetween = (a, b) => Math.round((dayDate(b) - dayDate(a)) / 86400000);
const isDay = (s) => /^\d{4}-\d{2}-\d{2}$/.test(s || "") && !Number.isNaN(dayDate(s).getTime()) && dayText(dayDate(s)) === s;

function today() {
  return new Intl.DateTimeFormat("en-CA", { timeZone: state.zone, year: "numeric", month: "2-digit", day: "2-digit" })
    .format(new Date());
}
function monthOf(day) {
  const [y, m] = day.split("-").map(Number);
  return { from: `${y}-${pad2(m)}-01`, to: dayText(new Date(Date.UTC(y, m, 0))) };
}
const wholeMonth = (from, to) => from.endsWith("-01") && monthOf(from).to === to;
function monthName(day) {
  return dayDate(day).toLocaleString("en", { month: "long", year: "numeric", timeZone: "UTC" });
}

function presetRange(name) {
  const t = today();
  if (name === "today") return { from: t, to: t, preset: name };
  if (name === "7d") return { from: addDays(t, -6), to: t, preset: name };
  if (name === "30d") return { from: addDays(t, -29), to: t, preset: name };
  return { ...monthOf(t), preset: "month" };
}

/** The range the address names: ?month=YYYY-MM, ?from=&to= (local days), or ?range=preset. */
function rangeFromUrl() {
  const month = params.get("month") || "";
  if (/^\d{4}-(0[1-9]|1[0-2])$/.test(month)) return { ...monthOf(month + "-01"), preset: null };
  const from = params.get("from"), to = params.get("to") || from;
  if (isDay(from) && isDay(to) && from <= to) return { from, to, preset: null };
  return presetRange(params.get("range"));
}

function readUrl() {
  params = new URLSearchParams(location.search);
  state.site = params.get("site");
  state.page = params.get("page");
  state.bots = params.get("bots") === "exclude";
  state.compare = params.get("compare") === "1";
  state.ends = params.get("ends") === "exits" ? "exits" : "entries";
  const limit = Number(params.get("pages"));
  state.pagesLimit = Number.isInteger(limit) && limit > 0 ? Math.min(limit, MAX_PAGES) : 10;
}

/** The view into the address; ``push``: a new history entry (the back button returns). */
function writeUrl(push) {
  const q = new URLSearchParams();
  q.set("site", state.site);
  if (state.page) q.set("page", state.page);
  if (state.preset) q.set("range", state.preset);  // a preset follows the days: "7 d" stays the last 7
  else if (wholeMonth(state.from, state.to)) q.set("month", state.from.slice(0, 7));
  else { q.set("from", state.from); q.set("to", state.to); }
  if (state.bots) q.set("bots", "exclude");
  if (state.compare) q.set("compare", "1");
  if (state.pagesLimit !== 10) q.set("pages", String(state.pagesLimit));
  if (state.ends === "exits") q.set("ends", "exits");
  if (params.has("refresh")) q.set("refresh", params.get("refresh"));
  const url = location.pathname + "?" + q;
  if (url !== location.pathname + location.search) history[push ? "pushState" : "replaceState"](null, "", url);
  params = q;
}

/** The granularity of the range chart: hours for a day or two, months past what days allow. */
function rangeBy() {
  const days = daysBetween(state.from, state.to) + 1;
  return days <= 2 ? "hour" : days <= MAX_DAY_BARS ? "day" : "month";
}
function previousRange() {
  if (wholeMonth(state.from, state.to)) return monthOf(dayText(new Date(dayDate(state.from) - 86400000)));
  const len = daysBetween(state.from, state.to) + 1;
  return { from: addDays(state.from, -len), to: addDays(state.from, -1) };
}

// -- charts -------------------------------------------------------------------

/** The y axis for a peak of ``n`` hits: a whole step (1, 2, 2.5 or 5 times a power of ten,
 * never below 1: counts are integers) and the first multiple of it at or above the peak,
 * in at most five steps. An empty chart runs to 1. */
function niceScale(n) {
  if (n <= 0) return { top: 1, step: 1 };
  for (let p = 1; ; p *= 10) {
    for (const f of [1, 2, 2.5, 5]) {
      const step = f * p;
      if (!Number.isInteger(step)) continue;
      const top = Math.ceil(n / step) * step;
      if (top / step <= 5) return { top, step };
    }
  }
}

function drawBars(svg, rows, label, previous) {
  const W = 720, H = 180, top = 8;
  const max = Math.max(0, ...rows.map((r) => r.hits));
  const axis = niceScale(Math.max(max, ...(previous || []).map((r) => r.hits)));
  const scale = axis.top;
  const y = (n) => H - (n / scale) * (H - top);
  const w = W / Math.max(rows.length, 1);
  const gap = w > 6 ? 1 : 0;
  svg.replaceChildren();
  for (let v = axis.step; v <= scale; v += axis.step) {
    const line = document.createElementNS(SVG, "line");
    line.setAttribute("x1", "0"); line.setAttribute("x2", String(W));
    line.setAttribute("y1", String(y(v))); line.setAttribute("y2", String(y(v)));
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
      shade.dataset.i = String(i);
      svg.append(shade);
    }
    const rect = document.createElementNS(SVG, "rect");
    rect.setAttribute("x", String(i * w + gap / 2));
    rect.setAttribute("y", String(y(r.hits)));
    rect.setAttribute("width", String(Math.max(w - gap, 0.5)));
    rect.setAttribute("height", String(H - y(r.hits)));
    rect.dataset.t = r.t;
    rect.dataset.n = String(r.hits);
    rect.dataset.i = String(i);
    const title = document.createElementNS(SVG, "title");
    title.textContent = hoverText(r, previous && previous[i], label);
    rect.append(title);
    svg.append(rect);
  });
  if (previous) {  // the previous period as a line, bucket for bucket
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", previous.slice(0, rows.length).map((r, i) => `${i * w + w / 2},${y(r.hits)}`).join(" "));
    svg.append(line);
    svg.dataset.previousTotal = String(previous.reduce((a, r) => a + r.hits, 0));
  } else {
    delete svg.dataset.previousTotal;
  }
  Object.assign(svg, { rows, previous, label });
  svg.dataset.total = String(total);
  svg.dataset.points = String(rows.length);
  svg.dataset.scale = String(scale);
  svg.dataset.step = String(axis.step);
  svg.dataset.renders = String(Number(svg.dataset.renders || 0) + 1);
  if (window.preaggFirstChart === undefined) window.preaggFirstChart = performance.now();
  return { total, max, scale: axis };
}

function hoverText(r, prev, label) {
  let text = `${label(r.t)}: ${fmt(r.hits)} hits`;
  if (r.pruned) text += " (past the site's retention: pruned)";
  if (prev) text += ` · previous period ${label(prev.t)}: ${fmt(prev.hits)}`;
  return text;
}

/** Labels of the y axis, the top first: one per step, whole numbers. */
function yAxis(id, axis) {
  const spans = [];
  for (let v = axis.top; v >= 0; v -= axis.step) {
    const s = document.createElement("span");
    s.textContent = fmt(v);
    spans.push(s);
  }
  $(id).replaceChildren(...spans);
}

/** Labels along the x axis: about six buckets, evenly spread, each under its bar. */
function xTicks(id, rows, label) {
  const n = rows.length;
  const want = Math.min(n, window.innerWidth < 500 ? 4 : 7);
  const picked = new Set();
  for (let k = 0; k < want; k++) picked.add(want === 1 ? 0 : Math.round((k * (n - 1)) / (want - 1)));
  $(id).replaceChildren(...[...picked].map((i) => {
    const s = document.createElement("span");
    s.textContent = label(rows[i].t);
    s.style.left = `${((i + 0.5) / n) * 100}%`;
    if (i === 0) s.classList.add("first");
    if (i === n - 1 && n > 1) s.classList.add("last");
    return s;
  }));
}

/** Hover values: the bucket under the pointer, written under the chart. */
function followPointer(svg, out) {
  svg.addEventListener("mousemove", (e) => {
    const i = e.target.dataset && e.target.dataset.i;
    if (i === undefined || !svg.rows) return;
    out.textContent = hoverText(svg.rows[i], svg.previous && svg.previous[i], svg.label);
  });
  svg.addEventListener("mouseleave", () => { out.textContent = ""; });
}

const labels = {
  minute: (t) => t.slice(11, 16),
  hour: (t) => t.slice(0, 16).replace("T", " "),
  day: (t) => t.slice(0, 10),
  month: (t) => t.slice(0, 7),
};
// Shorter labels for the ticks under a chart: the range's year is in its title.
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const ticks = {
  minute: (t) => t.slice(11, 16),
  hour: (t) => `${MONTHS[Number(t.slice(5, 7)) - 1]} ${Number(t.slice(8, 10))} ${t.slice(11, 16)}`,
  day: (t) => `${MONTHS[Number(t.slice(5, 7)) - 1]} ${Number(t.slice(8, 10))}`,
  month: (t) => `${MONTHS[Number(t.slice(5, 7)) - 1]} ${t.slice(0, 4)}`,
};

function showZone() {
  for (const el of document.querySelectorAll(".zone")) el.textContent = state.zone;
}

// -- CSV ------------------------------------------------------------------------
// What a chart or table shows, as `preagg query ... --csv` writes it. A cell that a
// spreadsheet would run as a formula (= + - @ first) is quoted with a leading '.

function csvCell(v) {
  let s = String(v);
  if (/^[=+\-@\t\r]/.test(s)) s = "'" + s;
  return /[",\n\r]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}
function download(name, header, rows) {
  const text = [header, ...rows].map((r) => r.map(csvCell).join(",")).join("\n") + "\n";
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
  a.download = name.replace(/[^\w.-]+/g, "_");
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
}
function chartCsv(svg, name) {
  const rows = svg.rows || [];
  if (svg.previous) {
    download(name, ["t", "hits", "previous_t", "previous_hits"],
      rows.map((r, i) => [r.t, r.hits, svg.previous[i] ? svg.previous[i].t : "", svg.previous[i] ? svg.previous[i].hits : ""]));
  } else {
    download(name, ["t", "hits"], rows.map((r) => [r.t, r.hits]));
  }
}

// -- cards --------------------------------------------------------------------

async function loadRealtime() {
  const rows = await apiRows("/api/hits", { site: state.site, page: state.page, from: "now-59m", to: "now", by: "minute" });
  const { total, max, scale } = drawBars($("rt-chart"), rows, labels.minute);
  yAxis("rt-y", scale);
  xTicks("rt-x", rows, ticks.minute);
  $("rt-total").textContent = fmt(total);
  $("rt-first").textContent = rows.length ? `${labels.minute(rows[0].t)} ${state.zone}` : "";
  $("rt-last").textContent = rows.length ? `${labels.minute(rows[rows.length - 1].t)} · peak ${fmt(max)}/min` : "";
}

function rangeLabel() {
  if (wholeMonth(state.from, state.to)) return monthName(state.from);
  return state.from === state.to ? state.from : `${state.from} – ${state.to}`;
}

async function loadRange() {
  const by = rangeBy();
  const filtered = state.bots && by !== "hour";  // bot hits are counted per day
  const query = (r) => apiRows("/api/hits", {
    site: state.site, page: state.page, from: r.from, to: r.to + "T23:59:59", by,
    bots: filtered ? "exclude" : null,
  });
  const people = api("/api/visitors", { site: state.site, page: state.page, from: state.from, to: state.to, by: "total" });
  const [rows, previous, visitors] = await Promise.all([
    query(state), state.compare ? query(previousRange()) : null, people,
  ]);
  const { total, max, scale } = drawBars($("range-chart"), rows, labels[by], previous);
  const v = visitors[0] || { visitors: 0, exact: true };
  $("range-visitors").textContent = (v.exact ? "" : "≈ ") + fmt(v.visitors);
  yAxis("range-y", scale);
  xTicks("range-x", rows, ticks[by]);
  whereIsTheData(total);
  $("range-label").textContent = rangeLabel();
  $("range-by").textContent = by;
  $("range-bots-note").hidden = !(state.bots && !filtered);
  $("range-total").textContent = fmt(total);
  $("range-previous").textContent = previous
    ? `previous period ${fmt(previous.reduce((a, r) => a + r.hits, 0))}` : "";
  $("range-first").textContent = rows.length ? labels[by](rows[0].t) : "";
  $("range-last").textContent = rows.length ? `${labels[by](rows[rows.length - 1].t)} · peak ${fmt(max)}/${by}` : "";
  $("next").disabled = state.to >= today();
  $("from").value = state.from;
  $("to").value = state.to;
  $("from").max = $("to").max = today();
  $("compare").checked = state.compare;
  for (const b of document.querySelectorAll("[data-preset]")) b.classList.toggle("on", b.dataset.preset === state.preset);
}

// -- where the data is -------------------------------------------------------------
// A site whose hits are from another period looked empty: the dashboard opens on its
// latest month with hits when the range it would open on has none, and says so; a range
// chosen without hits says where the site's hits are, with a link there.

function siteSpan() {
  const s = (state.sites || []).find((x) => x.site === state.site);
  return s && s.first_month ? { first: s.first_month, last: s.last_month } : null;
}
const missesData = (span) => span && (state.to.slice(0, 7) < span.first || state.from.slice(0, 7) > span.last);

/** Opening on a range without hits (no range in the address, or a new site): its latest month with hits. */
function openWhereTheDataIs() {
  const span = siteSpan();
  if (!missesData(span)) return;
  const was = rangeLabel();
  Object.assign(state, monthOf(span.last + "-01"), { preset: null });
  state.whereNote = `No hits in ${was}: showing ${monthName(state.from)}, the latest month with hits.`;
}

function whereIsTheData(total) {
  const el = $("where");
  const span = siteSpan();
  el.replaceChildren();
  if (state.whereNote) {
    el.textContent = state.whereNote;
    state.whereNote = null;
  } else if (total === 0 && missesData(span)) {
    const month = monthOf(span.last + "-01");
    const go = document.createElement("button");
    go.textContent = `show ${monthName(month.from)}`;
    go.addEventListener("click", () => setRange({ ...month, preset: null }));
    const when = span.first === span.last ? monthName(span.first + "-01") : `${monthName(span.first + "-01")} to ${monthName(span.last + "-01")}`;
    el.append(`No hits in this range: ${state.site} has hits from ${when}. `, go);
  } else if (total === 0 && !span) {
    el.textContent = `No hits stored for ${state.site} yet.`;
  }
  el.hidden = !el.childNodes.length;
}

/** Referrers as Plausible groups them: none (typed, bookmarked) as "Direct / None", the
 * site's own host (and its subdomains) as "(internal)", other hosts as they are. */
function groupReferrers(rows, site) {
  const own = site.replace(/^www\./, "");
  const merged = new Map();
  for (const row of rows) {
    if (row.name !== "referrer") continue;
    const host = row.value.replace(/^www\./, "");
    const value = row.value === "-" || row.value === "" ? "Direct / None"
      : host === own || host.endsWith("." + own) ? "(internal)" : row.value;
    merged.set(value, (merged.get(value) || 0) + row.count);
  }
  const referrers = [...merged].map(([value, count]) => ({ name: "referrer", value, count }))
    .sort((a, b) => b.count - a.count || a.value.localeCompare(b.value));
  const others = rows.filter((row) => row.name !== "referrer");
  const at = others.findIndex((row) => row.name > "referrer");
  return at < 0 ? [...others, ...referrers] : [...others.slice(0, at), ...referrers, ...others.slice(at)];
}

/** The last ``longest`` days of the range, and a note when that is less than the range. */
function clipped(longest, what) {
  const days = daysBetween(state.from, state.to) + 1;
  if (days <= longest) return { from: state.from, to: state.to, note: "" };
  return { from: addDays(state.to, 1 - longest), to: state.to, note: `${what} cover the last ${longest} days of the range` };
}

async function loadPages() {
  const r = clipped(MAX_PAGE_DAYS, "top pages");
  const ask = Math.min(state.pagesLimit + 1, MAX_PAGES);
  const rows = await api("/api/pages", {
    site: state.site, from: r.from, to: r.to, limit: ask, bots: state.bots ? "exclude" : null, metric: "visitors",
  });
  const shown = rows.slice(0, state.pagesLimit);
  state.pagesShown = shown;
  $("pages-range").textContent = rangeLabel() + (state.bots ? " · without bots" : "");
  $("pages-note").textContent = r.note;
  $("pages-more").hidden = rows.length <= state.pagesLimit || state.pagesLimit >= MAX_PAGES;
  $("pages-table").tBodies[0].replaceChildren(...shown.map((row) => {
    const tr = document.createElement("tr");
    const page = document.createElement("td");
    const n = document.createElement("td");
    const people = document.createElement("td");
    page.textContent = row.page;
    n.textContent = fmt(row.hits);
    n.className = "n";
    people.textContent = (row.visitors_exact ? "" : "≈ ") + fmt(row.visitors);
    people.className = "n";
    tr.append(page, n, people);
    tr.dataset.page = row.page;
    tr.classList.toggle("picked", row.page === state.page);
    tr.addEventListener("click", () => pickPage(row.page === state.page ? null : row.page));
    return tr;
  }));
}

// -- visits -------------------------------------------------------------------------
// Visits are the site's (a visit crosses pages): shown while no page is picked, once the
// server has counted any (the visits stage is on: PREAGG_HITS_VISITS) or the range is final.

async function loadVisits() {
  const el = $("visit-figures");
  if (state.page) { el.hidden = true; $("visits-note").textContent = ""; return; }
  const r = clipped(MAX_VISIT_DAYS, "visits");
  const [v] = await api("/api/visits", { site: state.site, from: r.from, to: r.to, by: "total" });
  state.hasVisits = Boolean(v && (v.visits > 0 || v.complete));
  el.hidden = !state.hasVisits;
  if (!state.hasVisits) { $("visits-note").textContent = ""; return; }
  $("range-visits").textContent = fmt(v.visits);
  $("range-views-per-visit").textContent = v.views_per_visit == null ? "–" : v.views_per_visit.toFixed(2);
  $("range-bounce-rate").textContent = v.bounce_rate == null ? "–" : `${Math.round(v.bounce_rate * 100)}%`;
  $("range-visit-duration").textContent = v.visit_duration == null ? "–" : duration(v.visit_duration);
  const notes = [r.note, v.complete ? "" : "visits so far: a visit counts once closed, a timeout after its last hit"];
  $("visits-note").textContent = notes.filter(Boolean).join("; ");
}

async function loadVisitPages() {
  const card = $("visit-pages");
  card.hidden = !state.hasVisits;
  if (!state.hasVisits) return;
  const r = clipped(MAX_VISIT_DAYS, "entry and exit pages");
  const rows = await api("/api/visit-pages", { site: state.site, from: r.from, to: r.to, order: state.ends, limit: 10 });
  const other = state.ends === "entries" ? "exits" : "entries";
  state.visitPagesShown = rows;
  for (const b of document.querySelectorAll("[data-ends]")) b.setAttribute("aria-pressed", String(b.dataset.ends === state.ends));
  $("visit-pages-metric").textContent = state.ends;
  $("visit-pages-other").textContent = other;
  $("visit-pages-range").textContent = rangeLabel();
  $("visit-pages-note").textContent = [r.note, rows.length ? "" : "no visit of this range has closed yet"].filter(Boolean).join("; ");
  $("visit-pages-table").tBodies[0].replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    for (const [text, cls] of [[row.page, ""], [fmt(row[state.ends]), "n"], [fmt(row[other]), "n"]]) {
      const td = document.createElement("td");
      td.textContent = text;
      td.className = cls;
      tr.append(td);
    }
    tr.dataset.page = row.page;
    return tr;
  }));
}

async function loadProps() {
  const r = clipped(MAX_PROP_DAYS, "properties");
  const rows = groupReferrers(await api("/api/props", { site: state.site, page: state.page, from: r.from, to: r.to }), state.site);
  state.propRows = rows;
  state.hasBots = rows.some((row) => row.name === "agent" && row.value === "Bot");
  $("bots-filter").hidden = !(state.hasBots || state.bots);
  $("props-scope").textContent = `${state.page || "all pages"} · ${rangeLabel()} · bots included`;
  $("props-note").textContent = r.note;
  const groups = new Map();  // rows come sorted by name, then count: each group is its top first
  for (const row of rows) {
    if (!groups.has(row.name)) groups.set(row.name, []);
    groups.get(row.name).push(row);
  }
  $("props-groups").replaceChildren(...[...groups].map(([name, values]) => propTable(name, values)));
}

function propTable(name, values) {
  const table = document.createElement("table");
  table.className = "prop";
  table.dataset.name = name;
  const caption = document.createElement("caption");
  caption.textContent = `${name} · ${values.length} value${values.length === 1 ? "" : "s"}`;
  table.append(caption);
  const open = state.openProps.has(name);
  const body = document.createElement("tbody");
  for (const row of open ? values : values.slice(0, PROPS_SHOWN)) {
    const tr = document.createElement("tr");
    for (const [text, cls] of [[row.value, ""], [fmt(row.count), "n"]]) {
      const td = document.createElement("td");
      td.textContent = text;
      td.className = cls;
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(body);
  if (values.length > PROPS_SHOWN) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = 2;
    const more = document.createElement("button");
    more.className = "more";
    more.textContent = open ? "show the top 10" : `show all ${values.length}`;
    more.addEventListener("click", () => {
      if (open) state.openProps.delete(name); else state.openProps.add(name);
      table.replaceWith(propTable(name, values));
    });
    td.append(more);
    tr.append(td);
    body.append(tr);
  }
  return table;
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

// The two charts first, then the tables: a site's property counts over a range read
// every daily rollup of it, and would hold the charts back behind them.
async function refreshAll() {
  for (const el of document.querySelectorAll(".bots-note")) el.hidden = !state.bots;
  $("bots").checked = state.bots;
  $("scope").textContent = state.page || "all pages";
  $("all-pages").hidden = !state.page;
  await run(loadRealtime, loadRange, loadVisits);
  await run(loadPages, loadProps, loadVisitPages);
}

function setRange(range, push = true) {
  Object.assign(state, { from: range.from, to: range.to, preset: range.preset || null });
  writeUrl(push);
  refreshAll();
}

function pickPage(page) {
  state.page = page;
  writeUrl(true);
  refreshAll();
}

function startPolling() {
  clearInterval(state.timer);
  state.timer = setInterval(() => {
    state.ticks += 1;
    // The live chart every tick; the range, pages and properties every sixth while the range has today.
    if (state.ticks % 6 !== 0 || state.to < today()) return void run(loadRealtime);
    if (state.preset) Object.assign(state, presetRange(state.preset));  // past midnight, "today" moves
    run(loadRealtime, loadRange, loadVisits, loadPages, loadProps, loadVisitPages);
  }, REFRESH_MS);
}

/** The view the address names (at start, and on back and forward). */
function applyUrl() {
  readUrl();
  adoptSite(state.sites);
  Object.assign(state, rangeFromUrl());
  if (!["month", "from", "range"].some((k) => params.has(k))) openWhereTheDataIs();
}

function adoptSite(sites) {
  if (!state.site || !sites.some((s) => s.site === state.site)) state.site = sites[0].site;
  $("site").value = state.site;
  state.zone = state.zones[state.site] || "UTC";
  showZone();
}

async function start() {
  await readLimits();
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
  $("site").replaceChildren(...sites.map(({ site }) => {
    const opt = document.createElement("option");
    opt.value = site;
    opt.textContent = site;
    return opt;
  }));
  if (!sites.length) {
    status("no hits stored yet");
    return;
  }
  state.sites = sites;
  state.zones = Object.fromEntries(sites.map((s) => [s.site, s.zone || "UTC"]));
  applyUrl();
  writeUrl(false);
  await refreshAll();
  startPolling();
}

$("site").addEventListener("change", (e) => {
  state.site = e.target.value;
  state.page = null;
  adoptSite(state.sites);
  if (state.preset) Object.assign(state, presetRange(state.preset));  // the new site's today
  openWhereTheDataIs();
  writeUrl(true);
  refreshAll();
});
$("all-pages").addEventListener("click", () => pickPage(null));
function step(by) {
  if (wholeMonth(state.from, state.to)) {
    const day = by < 0 ? dayText(new Date(dayDate(state.from) - 86400000)) : addDays(state.to, 1);
    setRange(monthOf(day));
  } else {
    const len = (daysBetween(state.from, state.to) + 1) * by;
    setRange({ from: addDays(state.from, len), to: addDays(state.to, len) });
  }
}
$("prev").addEventListener("click", () => step(-1));
$("next").addEventListener("click", () => step(1));
for (const b of document.querySelectorAll("[data-preset]")) {
  b.addEventListener("click", () => setRange(presetRange(b.dataset.preset)));
}
$("range-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const from = $("from").value, to = $("to").value;
  if (!isDay(from) || !isDay(to) || from > to) return status("pick a first day before the last", true);
  setRange({ from, to });
});
$("compare").addEventListener("change", (e) => {
  state.compare = e.target.checked;
  writeUrl(true);
  run(loadRange);
});
$("bots").addEventListener("change", (e) => {
  state.bots = e.target.checked;
  writeUrl(true);
  refreshAll();
});
for (const b of document.querySelectorAll("[data-ends]")) {
  b.addEventListener("click", () => {
    state.ends = b.dataset.ends;
    writeUrl(true);
    run(loadVisitPages);
  });
}
$("pages-more").addEventListener("click", () => {
  state.pagesLimit = Math.min(state.pagesLimit * 2, MAX_PAGES);
  writeUrl(false);
  run(loadPages);
});
$("rt-csv").addEventListener("click", () => chartCsv($("rt-chart"), `${state.site}-last-60-minutes.csv`));
$("range-csv").addEventListener("click", () =>
  chartCsv($("range-chart"), `${state.site}-${state.from}-${state.to}-by-${rangeBy()}.csv`));
$("pages-csv").addEventListener("click", () =>
  download(`${state.site}-pages-${state.from}-${state.to}.csv`, ["page", "hits", "visitors", "visitors_exact"],
    (state.pagesShown || []).map((r) => [r.page, r.hits, r.visitors, r.visitors_exact])));
$("visit-pages-csv").addEventListener("click", () =>
  download(`${state.site}-${state.ends}-${state.from}-${state.to}.csv`, ["page", "entries", "exits"],
    (state.visitPagesShown || []).map((r) => [r.page, r.entries, r.exits])));
$("props-csv").addEventListener("click", () =>
  download(`${state.site}-props-${state.from}-${state.to}.csv`, ["name", "value", "count"],
    (state.propRows || []).map((r) => [r.name, r.value, r.count])));
followPointer($("rt-chart"), $("rt-hover"));
followPointer($("range-chart"), $("range-hover"));
window.addEventListener("popstate", () => {  // back and forward: the view the address names
  if (!state.sites) return;
  applyUrl();
  refreshAll();
});
$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("preagg-token", token);
  $("token-form").hidden = true;
  start();
});
start();
