"""Minute counts into counters: minutes and hours of pages' and sites' days, day totals,
months' days, and the top lists.

Counts are kept by UTC minute and placed in the site's local day here, with the zones
read for this flush. A page past the day's cap counts in its site's rollups only, under
``(other)`` in the top pages; a day past its retention tier gets no counters of that tier.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.planning.documents import Touched
from pipeline.kinds.hits.planning.inputs import Calendars, DayKey, Key
from pipeline.kinds.hits.sites.caps import PageCaps

#: Per page-day: [events, the local day's start minute].
PageDays = dict[DayKey, list[int]]
#: One minute's count: its page-day, that page-day's entry, minutes since the day's start, count.
Cell = tuple[DayKey, list[int], int, int]
#: Per page-day: (the site's day, the page's day or ``None`` when refused, hours kept, minutes kept).
Targets = dict[DayKey, tuple[DocUpdate, DocUpdate | None, bool, bool]]


def page_days_of(counts: Mapping[Key, int], calendars: Calendars) -> tuple[PageDays, list[Cell]]:
    """Each count's local page-day, and each page-day's events and start."""
    page_days: PageDays = {}
    cells: list[Cell] = []
    for (site, page, minute), n in counts.items():
        ordinal, start = calendars.calendar(site).day_of(minute)
        pk = (site, page, ordinal)
        pd = page_days.get(pk)
        if pd is None:
            pd = page_days[pk] = [0, start]
        pd[0] += n
        cells.append((pk, pd, minute - start, n))
    return page_days, cells


def rank_top_pages(docs: Touched, page_days: PageDays, caps: PageCaps) -> None:
    """The batch's busiest pages take their place in the top lists first: a backfill's batch
    of a whole day then lists that day's busiest pages, whatever their order."""
    busy: dict[tuple[str, str, int], dict[str, int]] = {}
    for (site, page, ordinal), (n, *_) in page_days.items():
        if docs.admits(site, page, ordinal):
            month_ordinal = ordinal - date.fromordinal(ordinal).day + 1
            for period in ((site, "d", ordinal), (site, "m", month_ordinal)):
                pages = busy.setdefault(period, {})
                pages[page] = pages.get(page, 0) + n
    for period, pages in busy.items():
        for page in sorted(pages, key=lambda p: (-pages[p], p)):
            caps.top_key(period, page)


def day_targets(docs: Touched, pk: DayKey, start: int) -> tuple[DocUpdate, DocUpdate | None, bool, bool]:
    """A page-day's documents, made with their totals first (the order of their fields)."""
    site, page, ordinal = pk
    rd, total = docs.fields.rollups.daily, docs.fields.daily.total
    minutes_kept, hours_kept = docs.keeps(site, ordinal)
    cal = docs.calendars.calendar(site)
    site_day = docs.site_day(site, cal, ordinal, start)
    own = docs.admits(site, page, ordinal)
    if not own:
        site_day.inc.setdefault(rd.capped, 0)
    site_day.inc.setdefault(total, 0)
    page_day = docs.page_day(site, page, cal, ordinal, start) if own else None
    if page_day is not None:
        page_day.inc.setdefault(total, 0)
    return site_day, page_day, hours_kept, minutes_kept


def plan_minutes(docs: Touched, cells: list[Cell], caps: PageCaps) -> Targets:
    """Each minute's count into its site's day and its page's day: hours and minutes."""
    rd, fd = docs.fields.rollups.daily, docs.fields.daily
    targets: Targets = {}
    for pk, pd, at, n in cells:
        got = targets.get(pk)
        if got is None:
            got = targets[pk] = day_targets(docs, pk, pd[1])
        site_day, page_day, hours_kept, minutes_kept = got
        hour, minute_of_hour = divmod(at, 60)
        if page_day is None:
            caps.count_capped(n)
            site_day.add(rd.capped, n)
        if hours_kept:
            path = f"{fd.hourly}.{hour}"
            site_day.add(path, n)
            if page_day is not None:
                page_day.add(path, n)
        if minutes_kept:
            mpath = f"{fd.minute}.{hour}.{minute_of_hour}"
            site_day.add(mpath, n)
            if page_day is not None:
                page_day.add(mpath, n)
    return targets


def plan_totals(docs: Touched, page_days: PageDays, targets: Targets, caps: PageCaps) -> None:
    """Each page-day's events into day totals, months' days and totals, and the top lists."""
    f = docs.fields
    td, tm, rm, fm = f.rollups.top_daily, f.rollups.top_monthly, f.rollups.monthly, f.monthly
    for (site, page, ordinal), (n, *_) in page_days.items():
        site_day, page_day, *_ = targets[site, page, ordinal]
        site_day.add(f.daily.total, n)
        if page_day is not None:
            page_day.add(f.daily.total, n)
        day = date.fromordinal(ordinal)
        month_ordinal = ordinal - day.day + 1
        shown = page if page_day is not None else None
        docs.top(site, "d", day).add(f"{td.pages}.{caps.top_key((site, 'd', ordinal), shown)}", n)
        site_month = docs.site_month(site, day)
        site_month.add(rm.total, n)
        site_month.add(f"{rm.daily}.{day.day}", n)
        docs.top(site, "m", day.replace(day=1)).add(
            f"{tm.pages}.{caps.top_key((site, 'm', month_ordinal), shown)}", n
        )
        if page_day is None:
            continue
        page_month = docs.page_month(site, page, day)
        page_month.add(fm.total, n)
        page_month.add(f"{fm.daily}.{day.day}", n)
