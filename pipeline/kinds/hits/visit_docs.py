"""Closed visits into the documents charts read: the site's day and month rollups, and each
page's entries and exits of the day (pure).

A visit counts on the local day it starts, in its site's zone, and in that day's month; its
entry and exit pages count on that day too (:func:`~pipeline.core.sessions.tally`). Every
figure is an ``$inc``: the flushes of several partitions add up, each under its own marks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime

from pipeline.core.sessions import Visit, VisitTotals, tally
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.layout import HitsFields, VisitPagesFields, daily_id, site_daily_id, site_monthly_id
from pipeline.kinds.hits.planning.documents import Touched
from pipeline.kinds.hits.planning.inputs import Calendars

#: Sub-fields of a rollup's ``visits``: visits, bounces, views, seconds, histogram.
VISITS, BOUNCES, VIEWS, SECONDS, HISTOGRAM = "n", "b", "v", "d", "h"


def visit_updates(
    visits: Iterable[Visit], calendars: Calendars, fields: HitsFields, pages: VisitPagesFields
) -> list[DocUpdate]:
    """The updates that count ``visits``: per site its days and months, per page its day."""

    def day_of(site: str, ts: float) -> int:
        return calendars.calendar(site).day_of(int(ts // 60))[0]

    totals, ends = tally(visits, day_of)
    rd, rm = fields.rollups.daily, fields.rollups.monthly
    out: list[DocUpdate] = []
    months: dict[tuple[str, int, int], DocUpdate] = {}
    for (site, ordinal), t in totals.items():
        cal = calendars.calendar(site)
        day = date.fromordinal(ordinal)
        upd = DocUpdate(
            rd.collection,
            site_daily_id(day, site),
            Touched.day_meta(rd, cal, ordinal, cal.start(ordinal)),
            key={f"{rd.metadata}.{rd.site}": site},
        )
        _add(upd, rd.visits, t)
        out.append(upd)
        month = months.get((site, day.year, day.month))
        if month is None:
            month = months[site, day.year, day.month] = DocUpdate(
                rm.collection,
                site_monthly_id(day, site),
                {f"{rm.metadata}.{rm.date}": datetime(day.year, day.month, 1)},
                key={f"{rm.metadata}.{rm.site}": site},
            )
        _add(month, rm.visits, t)
    out.extend(months.values())
    for (site, ordinal, page), (entries, exits) in ends.items():
        day = date.fromordinal(ordinal)
        inc = {k: n for k, n in ((pages.entries, entries), (pages.exits, exits)) if n}
        out.append(
            DocUpdate(
                pages.collection,
                daily_id(day, site, page),
                {f"{pages.metadata}.{pages.date}": datetime(day.year, day.month, day.day)},
                inc,
                key={f"{pages.metadata}.{pages.site}": site, f"{pages.metadata}.{pages.page}": page},
            )
        )
    return out


def _add(upd: DocUpdate, field: str, t: VisitTotals) -> None:
    for name, n in ((VISITS, t.visits), (BOUNCES, t.bounces), (VIEWS, t.views), (SECONDS, t.duration)):
        upd.add(f"{field}.{name}", n)
    for i, n in enumerate(t.buckets):
        if n:
            upd.add(f"{field}.{HISTOGRAM}.{i}", n)
