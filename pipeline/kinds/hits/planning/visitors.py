"""Visitors into the sketches of the documents their hits touched: pages' and sites' days
(and their hours, where the day keeps hours) and months."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

from pipeline.core.calendar import SLOT
from pipeline.core.uniques import Budget
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.layout import register_fields
from pipeline.kinds.hits.planning.documents import Touched
from pipeline.kinds.hits.visit_log import VisitLog
from pipeline.kinds.hits.visits import Places, add_visitors


def plan_visitors(
    docs: Touched,
    visits: VisitLog,
    visitor_keys: Callable[[int], bytes],
    budget: Budget,
    writer: int | None,
) -> list[DocUpdate]:
    """The window's visitors added by :func:`~pipeline.kinds.hits.visits.add_visitors`, with
    ``visitor_keys`` (local day ordinal → key); ``writer``: their one source partition, if one.
    Returns the extra updates it makes (registers kept apart from their documents)."""
    fd, fm = docs.fields.daily, docs.fields.monthly
    rd, rm = docs.fields.rollups.daily, docs.fields.rollups.monthly

    def day_of(site: str, slot: int) -> tuple[int, int]:
        return docs.calendars.calendar(site).day_of(slot * SLOT)

    def documents(
        site: str, page: str, ordinal: int, start: int
    ) -> tuple[list[DocUpdate], list[DocUpdate], bool]:
        cal = docs.calendars.calendar(site)
        day = date.fromordinal(ordinal)
        days = [docs.site_day(site, cal, ordinal, start)]
        months = [docs.site_months.get((site, day.year, day.month))]
        if docs.admits(site, page, ordinal):
            days.append(docs.page_day(site, page, cal, ordinal, start))
            months.append(docs.page_months.get((site, page, day.year, day.month)))
        return days, [m for m in months if m is not None], docs.keeps(site, ordinal)[1]

    return add_visitors(
        visits,
        Places(day_of, documents, fd.visitors, fd.hourly_visitors, fm.visitors),
        visitor_keys,
        budget,
        docs.refused,
        docs.record,
        register_fields(docs.fields.mode),
        writer,
        lambda upd, path: (
            upd.collection in (rd.collection, rm.collection) and path in (rd.visitors, rm.visitors)
        ),
    )
