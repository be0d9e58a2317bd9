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
from pipeline.kinds.hits.visits import add_visitors


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

    # Per (site, page, local day): its days' and months' updates and whether it keeps hours;
    # a page's quarter hours of one day differ only in their hour.
    made: dict[tuple[str, str, int], tuple[list[DocUpdate], list[DocUpdate], bool]] = {}

    def targets(site: str, page: str, slot: int) -> tuple[int, list[tuple[DocUpdate, str]]]:
        cal = docs.calendars.calendar(site)
        ordinal, start = cal.day_of(slot * SLOT)
        got = made.get((site, page, ordinal))
        if got is None:
            day = date.fromordinal(ordinal)
            days = [docs.site_day(site, cal, ordinal, start)]
            months = [docs.site_months.get((site, day.year, day.month))]
            if docs.admits(site, page, ordinal):
                days.append(docs.page_day(site, page, cal, ordinal, start))
                months.append(docs.page_months.get((site, page, day.year, day.month)))
            got = made[site, page, ordinal] = (
                days,
                [m for m in months if m is not None],
                docs.keeps(site, ordinal)[1],
            )
        days, kept_months, hours_kept = got
        hour = f"{fd.hourly_visitors}.{(slot * SLOT - start) // 60}"
        out = []
        for upd in days:
            out.append((upd, fd.visitors))
            if hours_kept:
                out.append((upd, hour))
        out.extend((m, fm.visitors) for m in kept_months)
        return ordinal, out

    return add_visitors(
        visits,
        targets,
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
