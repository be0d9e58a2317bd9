"""Hit time series: the real-time chart (minutes) and the historical chart (days, months).

Each query is one indexed read: a range on (site, page, date) over the daily
collection (minute and hour series) or the monthly one (day and month series),
projecting only the counters it needs.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kinds.hits.layout import HitsFields, hits_fields, site_filter
from pipeline.query.series import Granularity, add_into, floor, next_bucket, zero_filled

Series = list[tuple[datetime, int]]


def _items(doc: dict[str, Any], by: Granularity, fields: HitsFields) -> list[tuple[datetime, int]]:
    if by in ("minute", "hour"):
        f = fields.daily
        day: datetime = doc[f.metadata][f.date]
        if by == "hour":
            return [(day + timedelta(hours=int(h)), int(n)) for h, n in doc.get(f.hourly, {}).items()]
        return [
            (day + timedelta(hours=int(h), minutes=int(m)), int(n))
            for h, mins in doc.get(f.minute, {}).items()
            for m, n in mins.items()
        ]
    fm = fields.monthly
    month: datetime = doc[fm.metadata][fm.date]
    if by == "day":
        return [(month.replace(day=int(d)), int(n)) for d, n in doc.get(fm.daily, {}).items()]
    return [(month, int(doc.get(fm.total, 0)))]


def series_query(
    site: str, page: str | None, start: datetime, end: datetime, by: Granularity, fields: HitsFields
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Collection, filter and projection of the one read a series needs."""
    daily = by in ("minute", "hour")
    f = fields.daily if daily else fields.monthly
    lo, hi = (
        (floor(start, "day"), floor(end, "day")) if daily else (floor(start, "month"), floor(end, "month"))
    )
    flt = site_filter(f, site, page, lo, hi)
    counter = {
        "minute": fields.daily.minute,
        "hour": fields.daily.hourly,
        "day": fields.monthly.daily,
        "month": fields.monthly.total,
    }[by]
    return f.collection, flt, {f"{f.metadata}.{f.date}": 1, counter: 1, "_id": 0}


async def hits_series(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    page: str | None,
    start: datetime,
    end: datetime,
    by: Granularity,
    fields: HitsFields | None = None,
) -> Series:
    """Zero-filled hit counts of a page (or of all pages of a site) per bucket in [start, end]."""
    fields = fields or hits_fields()
    coll, flt, proj = series_query(site, page, start, end, by, fields)
    acc: dict[datetime, int] = {}
    async for doc in db[coll].find(flt, proj):
        add_into(acc, _items(doc, by, fields))
    return zero_filled(start, end, by, acc)


async def top_pages(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    first: date,
    last: date,
    limit: int = 10,
    fields: HitsFields | None = None,
) -> list[tuple[str, int]]:
    """The pages of ``site`` with the most hits from ``first`` to ``last`` (UTC days, inclusive).

    One indexed read of the site's monthly documents (the (site, page, date) index,
    its site prefix): a page costs one document per month of the range, of at most 31
    counters, whatever its traffic. A month inside the range counts by its total; the
    range's first and last months sum their days. Most hits first, then by page.
    """
    fields = fields or hits_fields()
    f = fields.monthly
    lo, hi = datetime(first.year, first.month, 1), datetime(last.year, last.month, 1)
    flt = {f"{f.metadata}.{f.site}": site, f"{f.metadata}.{f.date}": {"$gte": lo, "$lte": hi}}
    proj = {f"{f.metadata}.{f.page}": 1, f"{f.metadata}.{f.date}": 1, f.daily: 1, f.total: 1, "_id": 0}
    sums: dict[str, int] = {}
    async for doc in db[f.collection].find(flt, proj):
        month: datetime = doc[f.metadata][f.date]
        page: str = doc[f.metadata][f.page]
        end = next_bucket(month, "month") - timedelta(days=1)
        if first <= month.date() and end.date() <= last:
            n = int(doc.get(f.total, 0))
        else:
            n = sum(
                int(v)
                for d, v in (doc.get(f.daily) or {}).items()
                if first <= month.date().replace(day=int(d)) <= last
            )
        if n:
            sums[page] = sums.get(page, 0) + n
    ranked = sorted(sums.items(), key=lambda r: (-r[1], r[0]))
    return ranked[:limit] if limit else ranked


async def known_sites(db: AsyncDatabase[dict[str, Any]], fields: HitsFields | None = None) -> list[str]:
    """Every site with hits, sorted: ``distinct`` on the monthly index's first field."""
    f = (fields or hits_fields()).monthly
    return sorted(await db[f.collection].distinct(f"{f.metadata}.{f.site}"))


async def busiest_page(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields | None = None
) -> tuple[str, str] | None:
    """(site, page) with the most hits over all months (for the demo's chart)."""
    fields = fields or hits_fields()
    f = fields.monthly
    pipeline: list[dict[str, Any]] = [
        {
            "$group": {
                "_id": {"s": f"${f.metadata}.{f.site}", "p": f"${f.metadata}.{f.page}"},
                "n": {"$sum": f"${f.total}"},
            }
        },
        {"$sort": {"n": -1}},
        {"$limit": 1},
    ]
    async for doc in await db[f.collection].aggregate(pipeline):
        return doc["_id"]["s"], doc["_id"]["p"]
    return None
