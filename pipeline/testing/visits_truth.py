"""The sessions invariant: every site-day's visits, bounces, views, durations and entry and exit
pages as stored equal the visit rule applied to the events themselves (pure truth, async read).

Used by the visits integration test, the chaos drill and the fault schedules: any visit lost,
counted twice or split by a crash, a rebalance or a lying store shows up as a named mismatch.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, date, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.sessions import DEFAULT_TIMEOUT, DURATION_BUCKETS, Sessions, Visit, tally
from pipeline.kinds.hits.layout import hits_fields, visit_pages_fields
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.traffic import Traffic

#: Per (site, UTC day of a visit's start): visits, bounces, views, seconds, duration histogram.
Figures = dict[tuple[str, date], tuple[Any, ...]]
#: Per (site, day, page, 0 entries | 1 exits): how many visits.
Ends = Counter[tuple[str, date, str, int]]


def visits_truth(traffic: Traffic, timeout: float = DEFAULT_TIMEOUT) -> tuple[Figures, Ends]:
    """The rule applied to the events in time order: a visitor is a person on one (UTC) day, as the
    daily salt keys them; per site and day of a visit's start its figures, and entries and exits."""
    people: dict[tuple[str, date], int] = {}
    s = Sessions(timeout)
    visits: list[Visit] = []
    for n, (site, page, ts, who) in enumerate(sorted(traffic.identified, key=lambda h: h[2])):
        person = people.setdefault((who, datetime.fromtimestamp(ts, UTC).date()), len(people))
        visits.extend(s.add(site, person, ts, page, n))
    visits.extend(s.close(math.inf))
    totals, ends = tally(visits, lambda _site, ts: datetime.fromtimestamp(ts, UTC).date().toordinal())
    figures = {
        (site, date.fromordinal(o)): (t.visits, t.bounces, t.views, t.duration, t.buckets)
        for (site, o), t in totals.items()
    }
    pages: Ends = Counter()
    for (site, o, page), (entries, exits) in ends.items():
        pages[(site, date.fromordinal(o), page, 0)] += entries
        pages[(site, date.fromordinal(o), page, 1)] += exits
    return figures, +pages


async def stored_visits(db: AsyncDatabase[dict[str, Any]]) -> tuple[Figures, Ends]:
    """What the site rollups' ``visits`` fields and the entries and exits documents hold."""
    rd, pf = hits_fields().rollups.daily, visit_pages_fields()
    figures: Figures = {}
    async for d in db[rd.collection].find({rd.visits: {"$exists": True}}):
        v = d[rd.visits]
        buckets = tuple(v.get("h", {}).get(str(i), 0) for i in range(len(DURATION_BUCKETS) + 1))
        figures[(d[rd.metadata][rd.site], d[rd.metadata][rd.date].date())] = (
            v["n"],
            v["b"],
            v["v"],
            v["d"],
            buckets,
        )
    pages: Ends = Counter()
    async for d in db[pf.collection].find():
        m = d[pf.metadata]
        pages[(m[pf.site], m[pf.date].date(), m[pf.page], 0)] += d.get(pf.entries, 0)
        pages[(m[pf.site], m[pf.date].date(), m[pf.page], 1)] += d.get(pf.exits, 0)
    return figures, +pages


async def stored_visits_of(settings: Settings) -> tuple[Figures, Ends]:
    """:func:`stored_visits` of the database ``settings`` name, through a client of its own."""
    client = mongo_client(settings.mongo_url or "")
    try:
        return await stored_visits(client[settings.db])
    finally:
        await client.close()


def visit_mismatches(stored: tuple[Figures, Ends], truth: tuple[Figures, Ends], limit: int = 20) -> list[str]:
    """Named differences between what is stored and the truth (empty: exact)."""
    problems: list[str] = []
    (got, got_ends), (want, want_ends) = stored, truth
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            problems.append(f"visits of {key[0]} {key[1]}: stored {got.get(key)}, truth {want.get(key)}")
    for end in sorted(set(got_ends) | set(want_ends)):
        if got_ends[end] != want_ends[end]:
            what = ("entries", "exits")[end[3]]
            problems.append(
                f"{what} of {end[0]} {end[1]} {end[2]}: stored {got_ends[end]}, truth {want_ends[end]}"
            )
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])
