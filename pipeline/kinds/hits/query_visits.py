"""Visits of a site over a range of its local days: the counts its rollups hold, per day, month
or over the whole range, and whether each is complete yet.

A visit counts once closed, on the local day it starts (docs/visits.md). So a day's figures
grow until the visits stage's event time (its watermark, saved in each partition's state) is a
timeout past the day's end: until then the row says ``complete: false``. The watermark is the
lowest of the partitions'; a partition that never saw a hit says nothing and holds none back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.calendar import Calendar
from pipeline.core.fields import FieldMode
from pipeline.core.sessions import DURATION_BUCKETS, median_duration
from pipeline.core.times import midnight
from pipeline.kinds.hits.layout import HitsFields, site_filter, visit_pages_fields, visit_state_fields
from pipeline.kinds.hits.visit_docs import BOUNCES, HISTOGRAM, SECONDS, VIEWS, VISITS


@dataclass
class VisitRow:
    """One bucket's visits (its first local day), and whether its figures are final."""

    t: date
    visits: int = 0
    bounces: int = 0
    views: int = 0
    seconds: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    complete: bool = False

    def add(self, v: Mapping[str, Any]) -> None:
        self.visits += _n(v, VISITS)
        self.bounces += _n(v, BOUNCES)
        self.views += _n(v, VIEWS)
        self.seconds += _n(v, SECONDS)
        h = v.get(HISTOGRAM)
        for i in range(len(self.buckets)):
            self.buckets[i] += _n(h, str(i)) if isinstance(h, Mapping) else 0

    def json(self) -> dict[str, Any]:
        n = self.visits
        median = median_duration(self.buckets)
        return {
            "t": self.t.isoformat(),
            "visits": n,
            "bounces": self.bounces,
            "bounce_rate": round(self.bounces / n, 4) if n else None,
            "views": self.views,
            "views_per_visit": round(self.views / n, 2) if n else None,
            "visit_duration": round(self.seconds / n, 1) if n else None,
            "median_duration_at_most": None if median is None or median == float("inf") else median,
            "complete": self.complete,
        }


def _n(doc: Any, key: str) -> int:
    got = doc.get(key) if isinstance(doc, Mapping) else None
    return got if isinstance(got, int) and not isinstance(got, bool) else 0


async def visits_watermark(
    db: AsyncDatabase[dict[str, Any]], group: str, topic: str, mode: FieldMode
) -> float | None:
    """The visits stage's event time: the lowest of its partitions' watermarks (``None``: none yet)."""
    sf = visit_state_fields(mode)
    marks = []
    heads = {"_id": {"$regex": f"^{re.escape(f'{group}/{topic}/')}[0-9]+$"}}
    async for d in db[sf.collection].find(heads, {sf.state: 1}):
        mark = (d.get(sf.state) or {}).get("watermark")
        if isinstance(mark, float):
            marks.append(mark)
    return min(marks) if marks else None


async def visit_rows(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    first: date,
    last: date,
    by: str,
    fields: HitsFields,
    cal: Calendar,
    settled: float | None,
) -> list[VisitRow]:
    """Per bucket of local days from ``first`` to ``last``, the visits that started in it;
    ``settled``: the event time before which every visit that ended has closed (``None``: none).
    A bucket is complete once ``settled`` is past its last local day."""
    rd = fields.rollups.daily
    flt = site_filter(rd, site, None, midnight(first), midnight(last))
    found: dict[date, Mapping[str, Any]] = {}
    async for d in db[rd.collection].find(flt, {f"{rd.metadata}.{rd.date}": 1, rd.visits: 1}):
        found[d[rd.metadata][rd.date].date()] = d.get(rd.visits) or {}
    rows: dict[date, VisitRow] = {}
    day = first
    while day <= last:
        key = first if by == "total" else day.replace(day=1) if by == "month" else day
        row = rows.get(key)
        if row is None:
            row = rows[key] = VisitRow(max(key, first), complete=True)
        row.add(found.get(day, {}))
        end = cal.start(day.toordinal() + 1) * 60  # the local day's end, epoch seconds
        row.complete = row.complete and settled is not None and settled >= end
        day += timedelta(days=1)
    return list(rows.values())


async def visit_pages(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    first: date,
    last: date,
    order: str,
    limit: int,
    mode: FieldMode,
) -> list[dict[str, Any]]:
    """The pages most visits of a site's days entered (``order`` "entries") or left ("exits")
    by, with both counts, summed over the days: exact, every page-day read (its index: site,
    date)."""
    vp = visit_pages_fields(mode)
    match = {
        f"{vp.metadata}.{vp.site}": site,
        f"{vp.metadata}.{vp.date}": {"$gte": midnight(first), "$lte": midnight(last)},
    }
    pipeline: list[dict[str, Any]] = [
        {"$match": match},
        {
            "$group": {
                "_id": f"${vp.metadata}.{vp.page}",
                "entries": {"$sum": {"$ifNull": [f"${vp.entries}", 0]}},
                "exits": {"$sum": {"$ifNull": [f"${vp.exits}", 0]}},
            }
        },
        {"$match": {order: {"$gt": 0}}},
        {"$sort": {order: -1, "_id": 1}},
        {"$limit": limit},
    ]
    return [
        {"page": d["_id"], "entries": d["entries"], "exits": d["exits"]}
        async for d in await db[vp.collection].aggregate(pipeline)
    ]
