"""Unique visitors stored as plain numbers beside their sketches, so that any MongoDB client reads them.

A sketch (:mod:`pipeline.core.uniques`) is merged by update operators from many writers and
read by our codec only. Once a period a worker wrote has settled (or every minute while it is
written without pause, every five while the worker writes commit after commit), the worker
reads the sketches of the documents it wrote visitors to (the site's rollup and each page's day
and month), estimates each, and stores the number in
``visitor_count`` with ``visitors_exact`` beside it.

Written with ``$max`` (and exactness with ``$min``), so that two workers counting the same
document in either order, a stale read written late, or a count done twice leave the highest
count seen: a sketch only grows, and so does its estimate (HyperLogLog++'s bias correction can
move it down by a fraction of its error where it switches estimators; the stored figure then
stays at the earlier one). The counts are derived data: the exactly-once counters and sketches
do not depend on them, and a worker stopped before counting leaves the figure of the previous
count until the document's next write (``preagg query visitors`` reads the sketches: always
current).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import date
from typing import Any

from prometheus_client.core import Metric
from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.times import midnight
from pipeline.kinds.hits.layout import (
    DocFields,
    HitsFields,
    daily_id,
    monthly_id,
    site_daily_id,
    site_monthly_id,
)
from pipeline.kinds.hits.query import by_ids
from pipeline.kinds.hits.query_visitors import Held, estimates
from pipeline.kinds.hits.sites.caps import Period
from pipeline.kinds.hits.sites.settle import Settler

#: Seconds a period must go unwritten before it is counted, and between two counts of one
#: written without pause.
SETTLE = 3.0
OPEN_EVERY = 60.0
#: Pages a period remembers to count; past it, the period counts every page document it has.
MAX_PAGES = 50_000
ALL: None = None


def count_update(f: DocFields, doc_id: str, key: Mapping[str, Any], value: int, exact: bool) -> UpdateOne:
    """The write of one document's count: raised only, exactness only ever lost."""
    return UpdateOne(
        {"_id": doc_id, **key},
        {"$max": {f.visitor_count: value}, "$min": {f.visitors_exact: exact}},
    )


def stale(doc: Mapping[str, Any], f: DocFields, value: int, exact: bool) -> bool:
    """Whether the stored figures differ from what a write would leave (else no write)."""
    stored, was_exact = doc.get(f.visitor_count), doc.get(f.visitors_exact)
    return stored is None or value > stored or (was_exact is not False and not exact)


class VisitorCounter(Settler):
    """The periods (and their pages) a worker wrote visitors to, counted once they settle."""

    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        fields: HitsFields,
        settle: float = SETTLE,
        open_every: float = OPEN_EVERY,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(self._count, "counting visitors", settle, open_every, clock, sleep)
        self.db, self.fields = db, fields
        #: Per period, the pages written since its last count (``ALL``: too many to list).
        self.pages: dict[Period, set[str] | None] = {}

    def wrote(self, visited: Mapping[tuple[str, int], Iterable[str]]) -> None:
        """A flush wrote visitors of these pages on these (site, local day ordinal)."""
        days, months = set(), set()
        for (site, ordinal), pages in visited.items():
            day = date.fromordinal(ordinal)
            month = (site, ordinal - day.day + 1)
            for period in ((site, "d", ordinal), (site, "m", month[1])):
                known = self.pages.setdefault(period, set())
                if known is not ALL:
                    known.update(pages)
                    if len(known) > MAX_PAGES:
                        self.pages[period] = ALL
            days.add((site, ordinal))
            months.add(month)
        self.touched(days, months)
        for period in [p for p in self.pages if p not in self._waiting]:
            del self.pages[period]  # forgotten by the settler (memory bound): its pages too

    async def _count(self, period: Period) -> str:
        site, kind, ordinal = period
        wanted = self.pages.get(period, set())
        taken = None if wanted is ALL else set(wanted)
        writes = await self.count_period(site, kind == "m", date.fromordinal(ordinal), taken)
        now = self.pages.get(period)
        if now is not None and taken is not None:
            now -= taken
            if not now:
                del self.pages[period]
        elif now is ALL and taken is None:
            del self.pages[period]
        return "counted" if writes else "already"

    async def count_period(self, site: str, monthly: bool, day: date, pages: set[str] | None) -> int:
        """Count the site's rollup and ``pages`` (``None``: every page) of one day or month; writes made."""
        f = self.fields
        r = f.rollups
        docs: list[tuple[DocFields, dict[str, Any], dict[str, Any]]] = []
        site_f = r.monthly if monthly else r.daily
        page_f: DocFields = f.monthly if monthly else f.daily
        rollup_id = site_monthly_id(day, site) if monthly else site_daily_id(day, site)
        site_key = f"{site_f.metadata}.{site_f.site}"
        proj = {site_f.visitors: 1, site_f.visitor_count: 1, site_f.visitors_exact: 1}
        async for d in by_ids(self.db[site_f.collection], [rollup_id], site_key, site, proj):
            docs.append((site_f, d, {site_key: site}))
        page_site = f"{page_f.metadata}.{page_f.site}"
        page_proj = {**proj, f"{page_f.metadata}.{page_f.page}": 1}
        if pages is None:
            flt = {page_site: site, f"{page_f.metadata}.{page_f.date}": midnight(day)}
            found: AsyncIterator[dict[str, Any]] = self.db[page_f.collection].find(flt, page_proj)
        else:
            make = monthly_id if monthly else daily_id
            found = by_ids(
                self.db[page_f.collection],
                [make(day, site, p) for p in sorted(pages)],
                page_site,
                site,
                page_proj,
            )
        async for d in found:
            key = {page_site: site, f"{page_f.metadata}.{page_f.page}": d[page_f.metadata][page_f.page]}
            docs.append((page_f, d, key))
        groups: list[list[Held]] = [
            [(df.collection, d["_id"], df.visitors, d.get(df.visitors))] for df, d, _ in docs
        ]
        found_estimates = await estimates(self.db, groups, f.mode)
        writes: dict[str, list[UpdateOne]] = {}
        for (df, d, key), e in zip(docs, found_estimates, strict=True):
            if d.get(df.visitors) is not None and stale(d, df, e.value, e.exact):
                writes.setdefault(df.collection, []).append(count_update(df, d["_id"], key, e.value, e.exact))
        for coll, ops in writes.items():
            await self.db[coll].bulk_write(ops, ordered=False)
        return sum(len(ops) for ops in writes.values())


async def uncounted(db: AsyncDatabase[dict[str, Any]], fields: HitsFields) -> list[str]:
    """``_id`` of every day or month document whose stored visitor number is not its sketch's
    estimate yet (tests, and whoever checks after a backfill); reads every sketch: not for big stores."""
    out: list[str] = []
    r = fields.rollups
    for f in (fields.daily, fields.monthly, r.daily, r.monthly):
        proj = {f.visitors: 1, f.visitor_count: 1, f.visitors_exact: 1}
        docs = [d async for d in db[f.collection].find({f.visitors: {"$exists": True}}, proj)]
        groups: list[list[Held]] = [[(f.collection, d["_id"], f.visitors, d.get(f.visitors))] for d in docs]
        for d, e in zip(docs, await estimates(db, groups, fields.mode), strict=True):
            if stale(d, f, e.value, e.exact):
                out.append(str(d["_id"]))
    return sorted(out)


def count_metrics(counter: VisitorCounter) -> Iterator[Metric]:
    """``preagg_visitor_counts_total{outcome}``."""
    yield counter.metric(
        "preagg_visitor_counts",
        "Periods whose stored visitor numbers a worker refreshed, by outcome (counted, already, moving, "
        "gave_up, forgotten, failed)",
    )
