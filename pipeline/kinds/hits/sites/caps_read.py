"""Seed :class:`~pipeline.kinds.hits.sites.caps.PageCaps` from the store before a plan; its metrics.

A period a worker has not written yet is read once: the pages with daily documents
that day (the (site, date) index, page names only) and the keys of the site rollup's
top pages (one document). Later flushes of the period read nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kinds.hits.layout import HitsFields, site_daily_id, site_monthly_id
from pipeline.kinds.hits.sites.caps import PageCaps, Period


def _dt(ordinal: int) -> datetime:
    d = date.fromordinal(ordinal)
    return datetime(d.year, d.month, d.day)


async def seed_caps(
    db: AsyncDatabase[dict[str, Any]],
    fields: HitsFields,
    caps: PageCaps,
    days: set[tuple[str, int]],
    months: set[tuple[str, int]],
) -> int:
    """Read what ``caps`` does not hold of these periods; the number of reads made."""
    fd = fields.daily
    rd, rm = fields.rollups.top_daily, fields.rollups.top_monthly
    reads = 0
    for site, ordinal in sorted(days):
        if not caps.knows_pages(site, ordinal):
            flt = {f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.date}": _dt(ordinal)}
            cursor = db[fd.collection].find(flt, {f"{fd.metadata}.{fd.page}": 1, "_id": 0})
            caps.seed_pages(site, ordinal, [d[fd.metadata][fd.page] async for d in cursor])
            reads += 1
    tops: dict[str, Period] = {}
    for site, ordinal in days:
        if not caps.knows_top((site, "d", ordinal)):
            tops[site_daily_id(date.fromordinal(ordinal), site)] = (site, "d", ordinal)
    monthly: dict[str, Period] = {}
    for site, ordinal in months:
        if not caps.knows_top((site, "m", ordinal)):
            monthly[site_monthly_id(date.fromordinal(ordinal), site)] = (site, "m", ordinal)
    for coll, pages, wanted in ((rd.collection, rd.pages, tops), (rm.collection, rm.pages, monthly)):
        ids = sorted(wanted)
        for i in range(0, len(ids), 100):  # small $in lists: quadratic on SecantusDB (docs/benchmarks.md)
            chunk = ids[i : i + 100]
            found: dict[str, list[str]] = {}
            async for doc in db[coll].find({"_id": {"$in": chunk}}, {pages: 1}):
                found[doc["_id"]] = list(doc.get(pages) or {})
            for doc_id in chunk:
                caps.seed_top(wanted[doc_id], found.get(doc_id, ()))
            reads += 1
    return reads


def caps_metrics(caps: PageCaps) -> Iterator[Metric]:
    """Pages refused a document of their own (past the day's cap) and their hits."""
    pages = CounterMetricFamily(
        "preagg_pages_capped", "Pages past PREAGG_HITS_MAX_PAGES_PER_DAY (once per site and day)"
    )
    pages.add_metric([], caps.capped_pages)
    hits = CounterMetricFamily("preagg_hits_capped", "Hits of capped pages: counted in site rollups only")
    hits.add_metric([], caps.capped_hits)
    yield from (pages, hits)


async def capped_days(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields, limit: int = 10
) -> list[dict[str, Any]]:
    """The latest site days with pages past the cap: site, day, hits counted without page documents."""
    rd = fields.rollups.daily
    out = []
    cursor = db[rd.collection].find(
        {rd.capped: {"$gt": 0}},
        {rd.capped: 1, rd.metadata: 1, "_id": 0},
        sort=[(f"{rd.metadata}.{rd.date}", -1)],
    )
    async for doc in cursor.limit(limit):
        meta = doc[rd.metadata]
        out.append(
            {"site": meta[rd.site], "day": meta[rd.date].date().isoformat(), "hits": int(doc[rd.capped])}
        )
    return out
