"""The hits kind's queries, each written once: one function from parsed parameters to its answer.

``preagg query`` (cli.py) and the HTTP API (api.py) call the same function and only format
what it returns: every rule (an unknown site refused, a range read in the site's own
calendar and refused when it ends before it starts, bots left out, visitors beside the
top pages) is here, so the two cannot disagree. Each answer also has its JSON rows,
the API's body and the CLI's ``--json`` alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.params import BadParam
from pipeline.core.routes import WAITING
from pipeline.core.text import json_rows
from pipeline.core.uniques import Estimate
from pipeline.kinds.hits.layout import HitsFields, hits_fields
from pipeline.kinds.hits.query import (
    TopPages,
    hits_series,
    instant,
    listed_sites,
    require_site,
    site_day_range,
    site_months,
    top_pages,
)
from pipeline.kinds.hits.query_bots import humans, top_human_pages
from pipeline.kinds.hits.query_props import PropCount, prop_counts, prop_rows
from pipeline.kinds.hits.query_visitors import VisitorRow, page_visitors, visitor_rows
from pipeline.kinds.hits.query_visits import VisitRow, visit_pages, visit_rows, visits_watermark
from pipeline.kinds.hits.render import series_rows
from pipeline.kinds.hits.settings import KEY
from pipeline.kinds.hits.sites.store import site_config
from pipeline.settings import Settings

Db = AsyncDatabase[dict[str, Any]]


@dataclass(frozen=True)
class Reading:
    """What every hits query reads with: the stored field names, and whether visitors' hashes
    change every day (a several-day bucket is then a sum of days)."""

    fields: HitsFields
    daily_salt: bool
    #: Where the visits stage keeps its state (its group and topic) and its timeout.
    visits: tuple[str, str, float] = ("", "", 0.0)

    @classmethod
    def of(cls, settings: Settings) -> Reading:
        s = settings.of(KEY)
        visits = (settings.group_id, s.visits_topic, s.visit_timeout)
        return cls(hits_fields(settings.schema), s.visitor_salt == "daily", visits)


@dataclass
class Series:
    """``hits``: zero-filled buckets, labelled in the site's zone."""

    series: list[tuple[datetime, int]]
    zone: str

    def json(self) -> list[dict[str, Any]]:
        return series_rows(self.series)


@dataclass
class Pages:
    """``pages``: the busiest pages, whether the ranking is proven exact (else its error
    bound), and each page's visitors when asked for."""

    top: TopPages
    visitors: dict[str, Estimate] | None = None

    def json(self) -> list[dict[str, Any]]:
        rows = json_rows(self.top, ("page", "hits"))
        if self.visitors is not None:
            for row in rows:
                e = self.visitors[row["page"]]
                row["visitors"], row["visitors_exact"] = e.value, e.exact
        return rows


@dataclass
class Props:
    """``props``: counts per (name, value)."""

    rows: list[PropCount]

    def json(self) -> list[dict[str, Any]]:
        return prop_rows(self.rows)


@dataclass
class Visitors:
    """``visitors``: unique visitors per bucket, each exact or estimated."""

    rows: list[VisitorRow]
    daily_salt: bool

    def table(self) -> list[tuple[str, int, bool, int, bool]]:
        """(t, visitors, exact, hits, sum_of_days) per bucket."""
        return [
            (r.t.isoformat(), r.visitors, r.exact, r.hits, r.sum_of_days(self.daily_salt)) for r in self.rows
        ]

    def json(self) -> list[dict[str, Any]]:
        header = ("t", "visitors", "exact", "hits", "sum_of_days")
        return [dict(zip(header, row, strict=True)) for row in self.table()]


@dataclass
class Sites:
    """``sites``: every site with hits or settings, its zone and its first and last month."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def json(self) -> list[dict[str, Any]]:
        return self.rows


async def _days(db: Db, a: Mapping[str, Any], r: Reading) -> tuple[date, date]:
    """The range of local days asked for, of a site that must exist."""
    await require_site(db, a["site"], r.fields, int(a.get(WAITING, 0)))
    return await site_day_range(db, a["site"], a["from"], a["to"])


async def hits(db: Db, a: Mapping[str, Any], r: Reading) -> Series:
    await require_site(db, a["site"], r.fields, int(a.get(WAITING, 0)))
    cal = (await site_config(db, a["site"])).calendar
    if instant(a["to"], cal) < instant(a["from"], cal):  # in the site's own zone
        raise BadParam("to", "is before `from` in the site's time zone")
    series = await hits_series(db, a["site"], a["page"], a["from"], a["to"], a["by"], r.fields, cal)
    if a["bots"] == "exclude":
        series = await humans(db, a["site"], a["page"], series, a["by"], r.fields)
    return Series(series, cal.zone)


async def pages(db: Db, a: Mapping[str, Any], r: Reading) -> Pages:
    first, last = await _days(db, a, r)
    rank = top_human_pages if a["bots"] == "exclude" else top_pages
    top = await rank(db, a["site"], first, last, a["limit"], r.fields)
    if a["metric"] != "visitors":
        return Pages(top)
    return Pages(top, await page_visitors(db, a["site"], [p for p, _ in top], first, last, r.fields))


async def props(db: Db, a: Mapping[str, Any], r: Reading) -> Props:
    first, last = await _days(db, a, r)
    return Props(await prop_counts(db, a["site"], a["page"], first, last, a["name"], r.fields))


async def visitors(db: Db, a: Mapping[str, Any], r: Reading) -> Visitors:
    first, last = await _days(db, a, r)
    rows = await visitor_rows(db, a["site"], a["page"], first, last, a["by"], r.fields)
    return Visitors(rows, r.daily_salt)


@dataclass
class Visits:
    """``visits``: visits per bucket of local days, each saying whether it is final."""

    rows: list[VisitRow]

    def json(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.rows]


async def visits(db: Db, a: Mapping[str, Any], r: Reading) -> Visits:
    first, last = await _days(db, a, r)
    if last < first:
        raise BadParam("to", "is before `from`")
    group, topic, timeout = r.visits
    mark = await visits_watermark(db, group, topic, r.fields.mode)
    cal = (await site_config(db, a["site"])).calendar
    settled = None if mark is None else mark - timeout
    return Visits(await visit_rows(db, a["site"], first, last, a["by"], r.fields, cal, settled))


@dataclass
class VisitPages:
    """``visit-pages``: pages by the visits that entered or left by them."""

    rows: list[dict[str, Any]]

    def json(self) -> list[dict[str, Any]]:
        return self.rows


async def visit_pages_answer(db: Db, a: Mapping[str, Any], r: Reading) -> VisitPages:
    first, last = await _days(db, a, r)
    if last < first:
        raise BadParam("to", "is before `from`")
    return VisitPages(await visit_pages(db, a["site"], first, last, a["order"], a["limit"], r.fields.mode))


async def sites(db: Db, a: Mapping[str, Any], r: Reading) -> Sites:
    months = await site_months(db, r.fields)
    return Sites(
        [
            {
                "site": c.site,
                "zone": c.zone,
                "first_month": months.get(c.site, (None, None))[0],
                "last_month": months.get(c.site, (None, None))[1],
            }
            for c in await listed_sites(db, r.fields)
        ]
    )
