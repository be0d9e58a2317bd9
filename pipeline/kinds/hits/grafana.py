"""Hit series for open-source Grafana, which has no MongoDB data source.

Two contracts, one series underneath:

- the JSON API data source's (``simpod-json-datasource``): ``GET /grafana`` (test
  connection), ``POST /grafana/metrics``, ``POST /grafana/metric-payload-options``
  and ``POST /grafana/query`` with the panel's ``range``, ``intervalMs``,
  ``maxDataPoints`` and ``targets``, answered as ``[{"target", "datapoints": [[value, ms]]}]``;
  a target is ``hits`` (page views) or ``visitors`` (unique visitors, by hour at the finest:
  :func:`~pipeline.kinds.hits.query_visitors.visitor_rows`);
- the Infinity data source's JSON/URL mode: ``GET /grafana/hits?site=&page=&from=&to=
  &intervalMs=&maxDataPoints=`` answering ``[{"time": ms, "hits": n}]``, with Grafana's
  ``${__from}``, ``${__to}`` and ``$__interval_ms`` in the URL (docs/grafana/).

The bucket (minute, hour, day, month) is the finest one no shorter than Grafana's
interval that fits ``maxDataPoints`` and the API's range bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pipeline.core.params import MAX_TEXT, BadParam, Param, check_bounds, parse_time_or_ms
from pipeline.core.routes import Route, rows_of
from pipeline.core.series import GRANULARITIES, Granularity
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.limits import MAX_SPAN, as_utc, check_span
from pipeline.kinds.hits.query import hits_series, known_sites, local_days
from pipeline.kinds.hits.query_visitors import visitor_rows
from pipeline.kinds.hits.sites.store import site_config
from pipeline.settings import Settings

#: A bucket's length for choosing one (a month counted as 31 days: never too fine).
BUCKET = {
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "month": timedelta(days=31),
}
#: Most targets one ``/query`` may ask for.
MAX_TARGETS = 20
#: The metrics served, of a site (or of one page: the payload's ``page``): hits, and unique
#: visitors (docs/visitors.md).
METRIC = "hits"
METRICS = (METRIC, "visitors")


def choose_by(start: datetime, end: datetime, interval_ms: int, max_points: int) -> Granularity:
    """The finest bucket at least ``interval_ms`` long giving at most ``max_points`` points in range."""
    span = as_utc(end) - as_utc(start)  # a naive end (site wall clock) with an aware start
    for by in GRANULARITIES:
        size = BUCKET[by]
        fits = span / size + 1 <= max(max_points, 1) and span <= MAX_SPAN[by]
        if size >= timedelta(milliseconds=interval_ms) and fits:
            return by
    if span > MAX_SPAN["month"]:
        raise BadParam("from", f"the range is longer than the API serves ({MAX_SPAN['month'].days} days)")
    return "month"


def epoch_ms(t: datetime) -> int:
    """A bucket start (aware, or naive UTC) as Unix milliseconds."""
    return int((t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp() * 1000)


@dataclass(frozen=True)
class Target:
    """One series a panel asks for."""

    ref: str
    site: str
    page: str | None
    metric: str = METRIC


@dataclass(frozen=True)
class PanelQuery:
    """A ``/query`` body: the panel's range, resolution and targets."""

    start: datetime
    end: datetime
    by: Granularity
    targets: tuple[Target, ...]


#: Longest interval Grafana may ask for, ms (ten years: a month bucket is the coarsest anyway).
MAX_INTERVAL_MS = 10 * 366 * 86_400_000
#: Most points a panel may ask for.
MAX_POINTS = 100_000


def _number(body: Mapping[str, Any], name: str, default: int, maximum: int) -> int:
    """A non-negative finite number of the body, at most ``maximum`` (NaN, Infinity, 1e308: 400)."""
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= maximum:
        raise BadParam(name, f"{str(value)[:40]} is not a number from 0 to {maximum}")
    return int(value)


def _text(value: Any, name: str) -> str:
    """A string of a body, as long as a GET parameter may be."""
    text = str(value)
    if len(text) > MAX_TEXT:
        raise BadParam(name, f"is longer than {MAX_TEXT} characters")
    return text


def parse_panel_query(body: Any, now: datetime) -> PanelQuery:
    """A JSON API data source ``/query`` body, checked; errors name the field (``targets[0].target``)."""
    if not isinstance(body, dict):
        raise BadParam("body", "expected a JSON object")
    rng = body.get("range")
    if not isinstance(rng, dict):
        raise BadParam("range", "expected {from, to}")
    times = []
    for k in ("from", "to"):
        raw = _text(rng.get(k, ""), f"range.{k}")
        try:
            times.append(parse_time_or_ms(raw, now))
        except ValueError as exc:
            raise BadParam(f"range.{k}", f"{raw[:40]!r} is not an ISO time or epoch ms ({exc})") from None
        check_bounds(f"range.{k}", times[-1])
    start, end = times
    if as_utc(end) < as_utc(start):  # one may be epoch ms (aware), the other an offset-less ISO time
        raise BadParam("range", "to is before from")
    targets = body.get("targets")
    if not isinstance(targets, list) or len(targets) > MAX_TARGETS:
        raise BadParam("targets", f"expected a list of at most {MAX_TARGETS}")
    out = []
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or t.get("hide"):
            continue
        metric = t.get("target", METRIC)
        if metric not in METRICS:
            raise BadParam(
                f"targets[{i}].target", f"{str(metric)[:40]!r}: the metrics are {', '.join(METRICS)}"
            )
        payload = t.get("payload") or t.get("data") or {}  # ``data`` in the plugin's older versions
        site = payload.get("site") if isinstance(payload, dict) else None
        if not isinstance(site, str) or not site:
            raise BadParam(f"targets[{i}].payload.site", "is required")
        _text(site, f"targets[{i}].payload.site")
        page = payload.get("page") or None
        page = _text(page, f"targets[{i}].payload.page") if page else None
        out.append(Target(_text(t.get("refId", chr(65 + i)), f"targets[{i}].refId"), site, page, metric))
    interval = _number(body, "intervalMs", 60_000, MAX_INTERVAL_MS)
    by = choose_by(start, end, interval, _number(body, "maxDataPoints", 1000, MAX_POINTS))
    return PanelQuery(start, end, by, tuple(out))


def timeseries(target: Target, series: Sequence[tuple[datetime, int]]) -> dict[str, Any]:
    """One target's answer: ``{"target": name, "datapoints": [[value, ms], ...]}`` (a visitors
    series named so beside the same page's hits)."""
    name = f"{target.site}{target.page or ''}" + ("" if target.metric == METRIC else f" {target.metric}")
    return {"target": name, "refId": target.ref, "datapoints": [[n, epoch_ms(t)] for t, n in series]}


def metrics_answer() -> list[dict[str, Any]]:
    """``/metrics``: the metrics and their payload (site chosen from a list, page typed)."""
    return [
        {
            "label": label,
            "value": metric,
            "payloads": [
                {"label": "site", "name": "site", "type": "select", "reloadMetric": False},
                {"label": "page (empty: all pages)", "name": "page", "type": "input"},
            ],
        }
        for metric, label in zip(METRICS, ("hits", "unique visitors"), strict=True)
    ]


def visitor_by(by: Granularity) -> Granularity:
    """The visitors' bucket for a panel's: hours at the finest (sketches are kept by hour)."""
    return "hour" if by == "minute" else by


def routes(settings: Settings) -> list[Route]:
    """Both contracts' endpoints over the hits documents in the deployment's schema."""
    fields = hits_fields(settings.schema)

    async def test(db: Any, a: Mapping[str, Any]) -> Any:
        return {"status": "ok", "metrics": list(METRICS)}

    async def metrics(db: Any, a: Mapping[str, Any]) -> Any:
        return metrics_answer()

    async def options(db: Any, a: Mapping[str, Any]) -> Any:
        if a["body"].get("name") != "site":
            return []
        return [{"label": s, "value": s} for s in await known_sites(db, fields)]

    async def series(db: Any, q: PanelQuery, t: Target) -> list[tuple[datetime, int]]:
        if t.metric == METRIC:
            return await hits_series(db, t.site, t.page, q.start, q.end, q.by, fields)
        cal = (await site_config(db, t.site)).calendar
        *_, d0, d1 = local_days(q.start, q.end, cal)
        first, last = date.fromordinal(d0), date.fromordinal(d1)
        rows = await visitor_rows(db, t.site, t.page, first, last, visitor_by(q.by), fields)
        return [(r.t, r.visitors) for r in rows]

    async def query(db: Any, a: Mapping[str, Any]) -> Any:
        q = parse_panel_query(a["body"], datetime.now(UTC))
        return [timeseries(t, await series(db, q, t)) for t in q.targets]

    async def rows(db: Any, a: Mapping[str, Any]) -> Any:
        by = choose_by(a["from"], a["to"], a["intervalMs"], a["maxDataPoints"])
        series = await hits_series(db, a["site"], a["page"], a["from"], a["to"], by, fields)
        return [{"time": epoch_ms(t), "hits": n} for t, n in series]

    def check(a: Mapping[str, Any]) -> None:
        check_span("from", a["from"], a["to"], MAX_SPAN["month"], "the API")

    json_api = "Grafana JSON API data source: "
    return [
        Route("/grafana", json_api + "test connection", (), test, {"type": "object"}, None, "grafana"),
        Route("/grafana/", json_api + "test connection", (), test, {}, None, "grafana", listed=False),
        Route(
            "/grafana/metrics",
            json_api + "the metrics (hits, visitors) and their payload",
            (),
            metrics,
            {"type": "array"},
            None,
            "grafana",
            "POST",
        ),
        Route(
            "/grafana/metric-payload-options",
            json_api + "the sites to pick from",
            (),
            options,
            {"type": "array"},
            None,
            "grafana",
            "POST",
        ),
        Route(
            "/grafana/query",
            json_api + "hit (or unique visitor) series of the targets over the panel's range",
            (),
            query,
            {"type": "array"},
            None,
            "grafana",
            "POST",
        ),
        Route(
            "/grafana/hits",
            "Grafana Infinity data source (JSON, URL): a hit series as rows of epoch ms and hits, "
            "at the resolution Grafana's interval asks for",
            (
                Param("site", "the site", required=True),
                Param("page", "one page (empty: all pages)"),
                Param("from", "start: epoch ms (${__from}) or ISO time", "time", required=True),
                Param("to", "end: epoch ms (${__to}) or ISO time", "time", required=True),
                Param(
                    "intervalMs",
                    "Grafana's $__interval_ms",
                    "integer",
                    default="60000",
                    minimum=0,
                    maximum=MAX_INTERVAL_MS,
                ),
                Param(
                    "maxDataPoints", "most points", "integer", default="1000", minimum=1, maximum=MAX_POINTS
                ),
            ),
            rows,
            rows_of(("time", {"type": "integer"}), ("hits", {"type": "integer", "minimum": 0})),
            check,
            "grafana",
        ),
    ]
