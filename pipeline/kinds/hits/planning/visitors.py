"""Visitors into the sketches of the documents their hits touched: pages' and sites' days
(and their hours, where the day keeps hours) and months."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

from pipeline.core.calendar import SLOT
from pipeline.core.uniques import Budget
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.families import PAGES, SITES, Family
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
    family: Family = None,
) -> list[DocUpdate]:
    """The window's visitors added by :func:`~pipeline.kinds.hits.visits.add_visitors`, with
    ``visitor_keys`` (local day ordinal → key); ``writer``: their one source partition, if one.
    Returns the extra updates it makes (registers kept apart from their documents).

    With the site rollups ahead of the pages (``family``, pipeline/kinds/hits/families.py) each
    holder's sketch is decided and written by one family: a site's day and month by the
    ``sites`` family (their registers in the rollup itself, or, from partition 64, in a
    document the ``pages`` family writes whenever asked: ``elsewhere``), a site's hours by the
    ``pages`` family, holder and register documents alike. Each family counts with its own
    budget, and the two count apart (small windows often, large ones seldom): a holder whose
    listing one family wrote and whose registers the other did not is an undercount."""
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
        hours = docs.keeps(site, ordinal)[1] and family != SITES
        return days, [m for m in months if m is not None], hours

    def inline(upd: DocUpdate, path: str) -> bool:
        return upd.collection in (rd.collection, rm.collection) and path in (rd.visitors, rm.visitors)

    return add_visitors(
        visits,
        Places(day_of, documents, fd.visitors, fd.hourly_visitors, fm.visitors),
        visitor_keys,
        budget,
        docs.refused,
        docs.record,
        register_fields(docs.fields.mode),
        writer,
        inline,
        inline if family == PAGES else None,
    )
