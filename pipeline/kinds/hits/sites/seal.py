"""Top pages made exact once a period settles: the worker that wrote a day (month) seals its list.

A top-pages document fills its byte budget in the order pages reach it (the busiest of
each batch first), so a page that grows busy late is counted under ``(other)``. Once a
worker has not written a period for :data:`SETTLE` seconds, it replaces the list with
the exact one, computed from the period's page documents (:func:`exact_list`), and
records two facts with it: ``sealed``, the sum of the counters at that moment (the list
stays exact while they add up to it), and ``below``, the most hits of a page left out.
The reader (:mod:`pipeline.kinds.hits.sites.rank`) ranks exactly from them.

Safety, with other workers writing the same document (keyless groups), a flush half
written, or a redo:

- the page documents are only trusted when they add up to the list's own sum (plus the
  day's capped hits, which have no page documents): a flush written in part leaves them
  apart, and the seal waits (:func:`consistent`);
- the replacement is conditional on the list being unchanged since it was read (an
  equality on the whole ``pages`` field), so an increment landing meanwhile is never
  overwritten: the seal is tried again later;
- idempotency marks are not touched, so a redo of a flush already applied is still
  skipped.

Each worker seals what it wrote (a set of periods in memory, bounded); a worker killed
before it sealed leaves the list as written: the reader then states its error bound,
and the next write to the period seals it again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import date
from typing import Any, Literal

from prometheus_client.core import Metric
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.times import midnight
from pipeline.kinds.hits.layout import HitsFields, site_daily_id, site_monthly_id
from pipeline.kinds.hits.sites.caps import OTHER_PAGE, PageCaps, Period, entry_bytes
from pipeline.kinds.hits.sites.settle import Settler
from pipeline.store.names.layout import escape_key

#: Seconds a period must go unwritten (by this worker) before its list is sealed.
SETTLE = 3.0
#: Seconds after which a period written without pause (a live site's day) is sealed anyway:
#: its answers are then off by at most the hits of the last minute (docs/rollups.md).
OPEN_EVERY = 60.0

Outcome = Literal["sealed", "already", "moving", "missing"]


def exact_list(totals: Mapping[str, int], budget: int, total: int) -> tuple[dict[str, int], int]:
    """The busiest pages (escaped) while they fit ``budget`` bytes, ``(other)`` = ``total`` − them.

    Also the most hits of a page left out (0 when every page fits). Ties are taken by
    page name, as the reader orders them.
    """
    out: dict[str, int] = {}
    used = listed = below = 0
    for page, n in sorted(totals.items(), key=lambda r: (-r[1], r[0])):
        if n <= 0:
            continue
        key = escape_key(page)
        size = entry_bytes(key)
        if not below and used + size <= budget:
            out[key] = n
            used += size
            listed += n
        else:
            below = max(below, n)
    if total > listed:
        out[OTHER_PAGE] = total - listed
    return out, below


def consistent(list_total: int, page_totals: Iterable[int], capped: int) -> bool:
    """Whether the page documents account for exactly what the list counts."""
    return sum(page_totals) + capped == list_total


async def seal_period(
    db: AsyncDatabase[dict[str, Any]],
    fields: HitsFields,
    period: Period,
    budget: int,
    caps: PageCaps | None = None,
) -> Outcome:
    """Make one period's top pages exact, if its documents agree (see the module's notes).

    ``caps``: the worker's view of the lists, told the new one (its next writes then
    count the listed pages by name and the others under ``(other)``).
    """
    site, kind, ordinal = period
    day = date.fromordinal(ordinal)
    monthly = kind == "m"
    top = fields.rollups.top_monthly if monthly else fields.rollups.top_daily
    doc_id = site_monthly_id(day, site) if monthly else site_daily_id(day, site)
    shard = {f"{top.metadata}.{top.site}": site}
    doc = await db[top.collection].find_one({"_id": doc_id, **shard}, {top.pages: 1, top.sealed: 1})
    if doc is None:
        return "missing"
    pages: dict[str, Any] = doc.get(top.pages) or {}
    list_total = sum(int(n) for n in pages.values())
    if doc.get(top.sealed) == list_total or not pages.get(OTHER_PAGE):
        return "already"  # sealed and unchanged since, or complete (every page listed: exact)
    f = fields.monthly if monthly else fields.daily
    flt = {f"{f.metadata}.{f.site}": site, f"{f.metadata}.{f.date}": midnight(day)}
    totals: Counter[str] = Counter()
    async for page_doc in db[f.collection].find(flt, {f"{f.metadata}.{f.page}": 1, f.total: 1, "_id": 0}):
        totals[page_doc[f.metadata][f.page]] += int(page_doc.get(f.total, 0))
    capped = await _capped(db, fields, site, day, monthly)
    if not consistent(list_total, totals.values(), capped):
        return "moving"
    exact, below = exact_list(totals, budget, list_total)
    done = await db[top.collection].update_one(
        {"_id": doc_id, **shard, top.pages: pages},
        {"$set": {top.pages: exact, top.sealed: list_total, top.below: below}},
    )
    if not done.matched_count:
        return "moving"
    if caps is not None:
        caps.seed_top(period, exact)
    return "sealed"


async def _capped(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields, site: str, day: date, monthly: bool
) -> int:
    """Hits of the period's pages past the day's page cap (they have no page documents)."""
    rd = fields.rollups.daily
    flt: dict[str, Any] = {f"{rd.metadata}.{rd.site}": site, rd.capped: {"$gt": 0}}
    if monthly:
        end = date(day.year + day.month // 12, day.month % 12 + 1, 1)
        flt[f"{rd.metadata}.{rd.date}"] = {"$gte": midnight(day), "$lt": midnight(end)}
    else:
        flt[f"{rd.metadata}.{rd.date}"] = midnight(day)
    found = db[rd.collection].find(flt, {rd.capped: 1, "_id": 0})
    return sum([int(d.get(rd.capped, 0)) async for d in found])


async def unsealed(db: AsyncDatabase[dict[str, Any]], fields: HitsFields) -> list[str]:
    """``_id`` of every top-pages list not proven exact (``preagg status``, tests): one with
    pages under ``(other)`` and counters that no longer add up to what was sealed."""
    out = []
    for top in (fields.rollups.top_daily, fields.rollups.top_monthly):
        flt = {f"{top.pages}.{OTHER_PAGE}": {"$gt": 0}}
        async for doc in db[top.collection].find(flt, {top.pages: 1, top.sealed: 1}):
            if sum(int(n) for n in (doc.get(top.pages) or {}).values()) != doc.get(top.sealed):
                out.append(str(doc["_id"]))
    return sorted(out)


class TopSealer(Settler):
    """A worker's periods waiting to be sealed, and the loop that seals them once settled."""

    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        fields: HitsFields,
        budget: int,
        caps: PageCaps | None = None,
        settle: float = SETTLE,
        open_every: float = OPEN_EVERY,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        async def seal(period: Period) -> str:
            return await seal_period(db, fields, period, budget, caps)

        super().__init__(seal, "sealing top pages", settle, open_every, clock, sleep)


def seal_metrics(sealer: TopSealer) -> Iterator[Metric]:
    """``preagg_top_pages_sealed_total{outcome}``."""
    yield sealer.metric(
        "preagg_top_pages_sealed",
        "Top-pages lists a worker tried to make exact, by outcome (sealed, already, moving, missing, "
        "gave_up, forgotten)",
    )
