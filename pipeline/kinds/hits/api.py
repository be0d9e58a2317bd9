"""The hits kind's HTTP endpoints: hit series, top pages, custom properties, sites.

Each answers with the same rows as the matching ``preagg query`` command; ranges are
bounded per granularity so one request stays one bounded read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, timedelta
from typing import Any

from pipeline.core.params import BadParam, Param, local_day
from pipeline.core.routes import Route, rows_of
from pipeline.core.series import GRANULARITIES
from pipeline.core.text import json_rows
from pipeline.kinds.hits import grafana
from pipeline.kinds.hits.bots import FILTERED_BY
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.limits import MAX_PAGE_DAYS, MAX_PROP_DAYS, MAX_SPAN, check_span
from pipeline.kinds.hits.query import hits_series, listed_sites, site_months, top_pages
from pipeline.kinds.hits.query_bots import humans, top_human_pages
from pipeline.kinds.hits.query_props import prop_counts, prop_rows
from pipeline.kinds.hits.render import series_rows
from pipeline.kinds.hits.sites.store import site_config
from pipeline.settings import Settings

SITE = Param("site", "the site, as in the events' `site`", required=True)
PAGE = Param("page", "one page (default: all pages of the site)")
BOTS = Param(
    "bots",
    "`exclude`: leave out hits whose `agent` property is `Bot` (`preagg produce --format clf`); "
    "known per day, so series need by=day or by=month",
    "choice",
    default="include",
    choices=("include", "exclude"),
)


def _check_series(a: Mapping[str, Any]) -> None:
    check_span("from", a["from"], a["to"], MAX_SPAN[a["by"]], f"by={a['by']}")
    if a["bots"] == "exclude" and a["by"] not in FILTERED_BY:
        raise BadParam("bots", "exclude needs by=day or by=month: bot hits are counted per day")


def _check_days(longest: int) -> Callable[[Mapping[str, Any]], None]:
    def check(a: Mapping[str, Any]) -> None:
        check_span("from", a["from"], a["to"] or a["from"], timedelta(days=longest), "this endpoint")

    return check


def _with_pruned(schema: dict[str, Any]) -> dict[str, Any]:
    """``/api/hits`` rows may carry ``pruned`` (a bucket past the site's retention)."""
    schema["items"]["properties"]["pruned"] = {
        "type": "boolean",
        "description": "true: the minute (hourly) counters of this bucket's day were pruned "
        "(past the site's retention); its count is not the day's traffic",
    }
    return schema


def routes(settings: Settings) -> list[Route]:
    """The hits endpoints, reading documents in the deployment's schema."""
    fields = hits_fields(settings.schema)

    async def series(db: Any, a: Mapping[str, Any]) -> Any:
        rows = await hits_series(db, a["site"], a["page"], a["from"], a["to"], a["by"], fields)
        if a["bots"] == "exclude":
            rows = await humans(db, a["site"], a["page"], rows, a["by"], fields)
        return series_rows(rows)

    async def days(db: Any, a: Mapping[str, Any]) -> tuple[date, date]:
        """The range in the site's calendar: ``today`` is the site's today."""
        today = (await site_config(db, a["site"])).calendar.today()
        first = local_day(a["from"], today)
        return first, local_day(a["to"], today) if a["to"] else first

    async def pages(db: Any, a: Mapping[str, Any]) -> Any:
        first, last = await days(db, a)
        if a["bots"] == "exclude":
            top = await top_human_pages(db, a["site"], first, last, a["limit"], fields)
        else:
            top = await top_pages(db, a["site"], first, last, a["limit"], fields)
        return json_rows(top, ("page", "hits"))

    async def props(db: Any, a: Mapping[str, Any]) -> Any:
        first, last = await days(db, a)
        return prop_rows(await prop_counts(db, a["site"], a["page"], first, last, a["name"], fields))

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

    day_range = (
        Param(
            "from",
            "first day, the site's local calendar (YYYY-MM-DD, today-29d)",
            "date",
            default="today-29d",
        ),
        Param("to", "last day (inclusive)", "date", default="today"),
    )
    count = {"type": "integer", "minimum": 0}
    return [
        Route(
            "/api/hits",
            "Zero-filled hit series of a site or page (as `preagg query hits --json`)",
            (
                SITE,
                PAGE,
                Param(
                    "from",
                    "start: ISO date or time (without offset: the site's local time), epoch ms or now-60m",
                    "time",
                    default="now-60m",
                ),
                Param(
                    "to",
                    "end (inclusive bucket): ISO time, epoch ms or now; a date is its whole local day",
                    "end",
                    default="now",
                ),
                Param("by", "bucket size", "choice", default="minute", choices=GRANULARITIES),
                BOTS,
            ),
            series,
            _with_pruned(rows_of(("t", {"type": "string", "format": "date-time"}), ("hits", count))),
            _check_series,
            "hits",
        ),
        Route(
            "/api/pages",
            "The pages of a site with the most hits over a range of its local days (as `preagg query pages`)",
            (
                SITE,
                *day_range,
                Param("limit", "most pages", "integer", default="10", minimum=1, maximum=1000),
                BOTS,
            ),
            pages,
            rows_of(("page", {"type": "string"}), ("hits", count)),
            _check_days(MAX_PAGE_DAYS),
            "hits",
        ),
        Route(
            "/api/props",
            "Custom property counts of a site or page over its local days (as `preagg query props --json`)",
            (
                SITE,
                PAGE,
                Param("from", "first local day", "date", default="today"),
                Param("to", "last local day (default: from)", "date"),
                Param("name", "one property (default: all)"),
            ),
            props,
            rows_of(("name", {"type": "string"}), ("value", {"type": "string"}), ("count", count)),
            _check_days(MAX_PROP_DAYS),
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
