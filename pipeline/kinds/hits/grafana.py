"""Hit series for open-source Grafana, which has no MongoDB data source.

Two contracts, one series underneath:

- the JSON API data source's (``simpod-json-datasource``): ``GET /grafana`` (test
  connection), ``POST /grafana/metrics``, ``POST /grafana/metric-payload-options``
  and ``POST /grafana/query`` with the panel's ``range``, ``intervalMs``,
  ``maxDataPoints`` and ``targets``, answered as ``[{"target", "datapoints": [[value, ms]]}]``;
- the Infinity data source's JSON/URL mode: ``GET /grafana/hits?site=&page=&from=&to=
  &intervalMs=&maxDataPoints=`` answering ``[{"time": ms, "hits": n}]``, with Grafana's
  ``${__from}``, ``${__to}`` and ``$__interval_ms`` in the URL (docs/grafana/).

The bucket (minute, hour, day, month) is the finest one no shorter than Grafana's
interval that fits ``maxDataPoints`` and the API's range bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.limits import MAX_SPAN, as_utc, check_span
from pipeline.kinds.hits.query import hits_series, known_sites
from pipeline.query.series import GRANULARITIES, Granularity
from pipeline.serve.params import BadParam, Param, parse_time_or_ms
from pipeline.serve.routes import Route, rows_of
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
#: The one metric served: hits of a site (or of one page: the payload's ``page``).
METRIC = "hits"


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


@dataclass(frozen=True)
class PanelQuery:
    """A ``/query`` body: the panel's range, resolution and targets."""

    start: datetime
    end: datetime
    by: Granularity
    targets: tuple[Target, ...]


def _number(body: Mapping[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if not isinstance(value, int | float) or value < 0:
        raise BadParam(name, f"{value!r} is not a non-negative number")
    return int(value)


def parse_panel_query(body: Any, now: datetime) -> PanelQuery:
    """A JSON API data source ``/query`` body, checked; errors name the field (``targets[0].target``)."""
    if not isinstance(body, dict):
        raise BadParam("body", "expected a JSON object")
    rng = body.get("range")
    if not isinstance(rng, dict):
        raise BadParam("range", "expected {from, to}")
    try:
        start, end = (parse_time_or_ms(str(rng.get(k, "")), now) for k in ("from", "to"))
    except ValueError as exc:
        raise BadParam("range", f"from/to are not ISO times ({exc})") from None
    if end < start:
        raise BadParam("range", "to is before from")
    targets = body.get("targets")
    if not isinstance(targets, list) or len(targets) > MAX_TARGETS:
        raise BadParam("targets", f"expected a list of at most {MAX_TARGETS}")
    out = []
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or t.get("hide"):
            continue
        if t.get("target", METRIC) != METRIC:
            raise BadParam(f"targets[{i}].target", f"{t.get('target')!r}: the one metric is {METRIC!r}")
        payload = t.get("payload") or t.get("data") or {}  # ``data`` in the plugin's older versions
        site = payload.get("site") if isinstance(payload, dict) else None
        if not isinstance(site, str) or not site:
            raise BadParam(f"targets[{i}].payload.site", "is required")
        page = payload.get("page") or None
        out.append(Target(str(t.get("refId", chr(65 + i))), site, str(page) if page else None))
    by = choose_by(start, end, _number(body, "intervalMs", 60_000), _number(body, "maxDataPoints", 1000))
    return PanelQuery(start, end, by, tuple(out))


def timeseries(target: Target, series: Sequence[tuple[datetime, int]]) -> dict[str, Any]:
    """One target's answer: ``{"target": name, "datapoints": [[hits, ms], ...]}``."""
    name = f"{target.site}{target.page or ''}"
    return {"target": name, "refId": target.ref, "datapoints": [[n, epoch_ms(t)] for t, n in series]}


def metrics_answer() -> list[dict[str, Any]]:
    """``/metrics``: the one metric and its payload (site chosen from a list, page typed)."""
    return [
        {
            "label": "hits",
            "value": METRIC,
            "payloads": [
                {"label": "site", "name": "site", "type": "select", "reloadMetric": False},
                {"label": "page (empty: all pages)", "name": "page", "type": "input"},
            ],
        }
    ]


def routes(settings: Settings) -> list[Route]:
    """Both contracts' endpoints over the hits documents in the deployment's schema."""
    fields = hits_fields(settings.schema)

    async def test(db: Any, a: Mapping[str, Any]) -> Any:
        return {"status": "ok", "metrics": [METRIC]}

    async def metrics(db: Any, a: Mapping[str, Any]) -> Any:
        return metrics_answer()

    async def options(db: Any, a: Mapping[str, Any]) -> Any:
        if a["body"].get("name") != "site":
            return []
        return [{"label": s, "value": s} for s in await known_sites(db, fields)]

    async def query(db: Any, a: Mapping[str, Any]) -> Any:
        q = parse_panel_query(a["body"], datetime.now(UTC))
        return [
            timeseries(t, await hits_series(db, t.site, t.page, q.start, q.end, q.by, fields))
            for t in q.targets
        ]

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
            json_api + "the metric (hits) and its payload",
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
            json_api + "hit series of the targets over the panel's range",
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
                Param("intervalMs", "Grafana's $__interval_ms", "integer", default="60000", minimum=0),
                Param("maxDataPoints", "most points", "integer", default="1000", minimum=1, maximum=100_000),
            ),
            rows,
            rows_of(("time", {"type": "integer"}), ("hits", {"type": "integer", "minimum": 0})),
            check,
            "grafana",
        ),
    ]
