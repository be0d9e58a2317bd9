"""The hits kind's HTTP endpoints: hit series, top pages, custom properties, sites.

Each answers with the same rows as the matching ``preagg query`` command; ranges are
bounded per granularity so one request stays one bounded read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from pipeline.core.routes import WAITING, Route, rows_of
from pipeline.core.text import json_rows
from pipeline.kinds.hits import grafana
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.queries import QUERIES
from pipeline.kinds.hits.query import (
    hits_series,
    listed_sites,
    require_site,
    site_day_range,
    site_months,
    top_pages,
)
from pipeline.kinds.hits.query_bots import humans, top_human_pages
from pipeline.kinds.hits.query_props import prop_counts, prop_rows
from pipeline.kinds.hits.query_visitors import page_visitors, visitor_rows
from pipeline.kinds.hits.render import series_rows
from pipeline.kinds.hits.settings import KEY
from pipeline.settings import Settings


def _with_pruned(schema: dict[str, Any]) -> dict[str, Any]:
    """``/api/hits`` rows may carry ``pruned`` (a bucket past the site's retention)."""
    schema["items"]["properties"]["pruned"] = {
        "type": "boolean",
        "description": "true: the minute (hourly) counters of this bucket's day were pruned "
        "(past the site's retention); its count is not the day's traffic",
    }
    return schema


def _with_visitors(schema: dict[str, Any]) -> dict[str, Any]:
    """``/api/pages?metric=visitors`` rows carry each page's unique visitors too."""
    props = schema["items"]["properties"]
    props["visitors"] = {"type": "integer", "minimum": 0, "description": "metric=visitors: unique visitors"}
    props["visitors_exact"] = {"type": "boolean", "description": "false: visitors is an estimate"}
    return schema


def routes(settings: Settings) -> list[Route]:
    """The hits endpoints, reading documents in the deployment's schema."""
    fields = hits_fields(settings.schema)
    daily = settings.of(KEY).visitor_salt == "daily"

    async def series(db: Any, a: Mapping[str, Any]) -> Any:
        await require_site(db, a["site"], fields, a.get(WAITING, 0))
        rows = await hits_series(db, a["site"], a["page"], a["from"], a["to"], a["by"], fields)
        if a["bots"] == "exclude":
            rows = await humans(db, a["site"], a["page"], rows, a["by"], fields)
        return series_rows(rows)

    async def days(db: Any, a: Mapping[str, Any]) -> tuple[date, date]:
        await require_site(db, a["site"], fields, a.get(WAITING, 0))
        return await site_day_range(db, a["site"], a["from"], a["to"])

    async def pages(db: Any, a: Mapping[str, Any]) -> Any:
        first, last = await days(db, a)
        if a["bots"] == "exclude":
            top = await top_human_pages(db, a["site"], first, last, a["limit"], fields)
        else:
            top = await top_pages(db, a["site"], first, last, a["limit"], fields)
        rows = json_rows(top, ("page", "hits"))
        if a["metric"] == "visitors":
            seen = await page_visitors(db, a["site"], [p for p, _ in top], first, last, fields)
            for row in rows:
                e = seen[row["page"]]
                row["visitors"], row["visitors_exact"] = e.value, e.exact
        return rows

    async def props(db: Any, a: Mapping[str, Any]) -> Any:
        first, last = await days(db, a)
        return prop_rows(await prop_counts(db, a["site"], a["page"], first, last, a["name"], fields))

    async def visitors(db: Any, a: Mapping[str, Any]) -> Any:
        first, last = await days(db, a)
        rows = await visitor_rows(db, a["site"], a["page"], first, last, a["by"], fields)
        return [
            {
                "t": r.t.isoformat(),
                "visitors": r.visitors,
                "exact": r.exact,
                "hits": r.hits,
                "sum_of_days": r.sum_of_days(daily),
            }
            for r in rows
        ]

    async def sites(db: Any, a: Mapping[str, Any]) -> Any:
        months = await site_months(db, fields)
        return [
            {
                "site": c.site,
                "zone": c.zone,
                "first_month": months.get(c.site, (None, None))[0],
                "last_month": months.get(c.site, (None, None))[1],
            }
            for c in await listed_sites(db, fields)
        ]

    count = {"type": "integer", "minimum": 0}
    return [
        QUERIES["hits"].route(
            series,
            _with_pruned(rows_of(("t", {"type": "string", "format": "date-time"}), ("hits", count))),
            "hits",
        ),
        QUERIES["pages"].route(
            pages, _with_visitors(rows_of(("page", {"type": "string"}), ("hits", count))), "hits"
        ),
        QUERIES["props"].route(
            props,
            rows_of(("name", {"type": "string"}), ("value", {"type": "string"}), ("count", count)),
            "hits",
        ),
        QUERIES["visitors"].route(
            visitors,
            rows_of(
                ("t", {"type": "string", "format": "date-time"}),
                ("visitors", count),
                (
                    "exact",
                    {
                        "type": "boolean",
                        "description": "false: a HyperLogLog estimate (0.81% standard error)",
                    },
                ),
                ("hits", count),
                (
                    "sum_of_days",
                    {
                        "type": "boolean",
                        "description": "true: a bucket of several days with the daily salt, whose figure "
                        "is the sum of its days' visitors (a person counts once a day)",
                    },
                ),
            ),
            "hits",
        ),
        Route(
            "/api/sites",
            "Every site with hits or settings, its time zone, and its first and last month with hits",
            (),
            sites,
            rows_of(
                ("site", {"type": "string"}),
                ("zone", {"type": "string"}),
                ("first_month", {"type": ["string", "null"], "description": "YYYY-MM"}),
                ("last_month", {"type": ["string", "null"], "description": "YYYY-MM"}),
            ),
            None,
            "hits",
        ),
        *grafana.routes(settings),
    ]
