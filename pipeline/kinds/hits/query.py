"""Hit time series: the real-time chart (minutes) and the historical chart (days, months).

Each query is one indexed read: a range on (site, page, date) over the daily
collection (minute and hour series) or the monthly one (day and month series),
projecting only the counters it needs. A whole site's chart reads its rollups
(``hits_site_daily``, ``hits_site_monthly``): one document per day or month, whatever
the number of pages.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterable, AsyncIterator
from datetime import date, datetime, timedelta
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.calendar import EPOCH_ORDINAL, Calendar, dt_minute, zone_info
from pipeline.core.params import NotFound
from pipeline.core.series import Granularity, add_into, next_bucket
from pipeline.core.times import midnight
from pipeline.kinds.hits.layout import (
    HitsFields,
    MonthlyFields,
    RollupFields,
    hits_fields,
    monthly_id,
    read_fields,
    site_filter,
)
from pipeline.kinds.hits.sites.rank import PeriodList, plan, rank
from pipeline.kinds.hits.sites.store import SiteConfig, load, site_config
from pipeline.store.names.layout import unescape_key


class Series(list[tuple[datetime, int]]):
    """(bucket start as an aware local time with its offset, hits), and which buckets are pruned.

    ``pruned``: the buckets (indexes) of days whose minute (hourly) counters are past the
    site's retention, wholly or in part: their zeros are not zeros. Known
    from the documents themselves: a day whose counters add up to less than its total.
    """

    pruned: frozenset[int] = frozenset()


def instant(t: datetime, cal: Calendar) -> int:
    """UTC minute of ``t``: an aware time as it is, a naive one as the site's wall-clock time."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=zone_info(cal.zone_of_day(t.date().toordinal())))
    return dt_minute(t)


def local_days(start: datetime, end: datetime, cal: Calendar) -> tuple[int, int, int, int]:
    """(first, last UTC minute; first, last local day ordinal) of a range."""
    lo, hi = instant(start, cal), instant(end, cal)
    return lo, hi, cal.day_of(lo)[0], cal.day_of(hi)[0]


def _day_dt(ordinal: int) -> datetime:
    d = date.fromordinal(ordinal)
    return datetime(d.year, d.month, d.day)


def _doc_start(doc: dict[str, Any], fields: HitsFields) -> int:
    """UTC minute a daily document's day starts at (a UTC day when it records none)."""
    meta = doc[fields.daily.metadata]
    start = meta.get(fields.daily.start)
    if isinstance(start, datetime):
        return dt_minute(start)
    day: datetime = meta[fields.daily.date]
    return (day.date().toordinal() - EPOCH_ORDINAL) * 1440


def _buckets(by: Granularity, lo: int, hi: int, d0: int, d1: int, cal: Calendar) -> list[int]:
    """Bucket keys in order: UTC minutes (minute, hour) or local day ordinals (day, month)."""
    if by == "minute":
        return list(range(lo, hi + 1))
    if by == "hour":
        out = []
        for d in range(d0, d1 + 1):
            s, e = cal.start(d), cal.end(d)
            out += [b for b in range(s, e, 60) if b + 60 > lo and b <= hi]
        return out
    if by == "day":
        return list(range(d0, d1 + 1))
    months = []
    m = date.fromordinal(d0).replace(day=1)
    while m.toordinal() <= d1:
        months.append(m.toordinal())
        m = next_bucket(datetime(m.year, m.month, 1), "month").date()
    return months


def series_query(
    site: str, page: str | None, d0: int, d1: int, by: Granularity, fields: HitsFields
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Collection, filter and projection of the one read a series needs (local days d0..d1)."""
    daily = by in ("minute", "hour")
    f = fields.daily if daily else fields.monthly
    lo, hi = _day_dt(d0), _day_dt(d1)
    if not daily:
        lo, hi = lo.replace(day=1), hi.replace(day=1)
    flt = site_filter(f, site, page, lo, hi)
    counter = {
        "minute": fields.daily.minute,
        "hour": fields.daily.hourly,
        "day": fields.monthly.daily,
        "month": fields.monthly.total,
    }[by]
    proj = {f"{f.metadata}.{f.date}": 1, counter: 1, "_id": 0}
    if daily:
        proj[f"{f.metadata}.{fields.daily.start}"] = 1
        proj[fields.daily.total] = 1  # a day whose counters add up to less was pruned
    return f.collection, flt, proj


def _items(doc: dict[str, Any], by: Granularity, fields: HitsFields) -> list[tuple[int, int]]:
    """(bucket key, count) of one document."""
    if by in ("minute", "hour"):
        f = fields.daily
        start = _doc_start(doc, fields)
        if by == "hour":
            return [(start + 60 * int(h), int(n)) for h, n in doc.get(f.hourly, {}).items()]
        return [
            (start + 60 * int(h) + int(m), int(n))
            for h, mins in doc.get(f.minute, {}).items()
            for m, n in mins.items()
        ]
    fm = fields.monthly
    month: datetime = doc[fm.metadata][fm.date]
    if by == "day":
        return [
            (month.date().replace(day=int(d)).toordinal(), int(n)) for d, n in doc.get(fm.daily, {}).items()
        ]
    return [(month.date().toordinal(), int(doc.get(fm.total, 0)))]


async def hits_series(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    page: str | None,
    start: datetime,
    end: datetime,
    by: Granularity,
    fields: HitsFields | None = None,
    calendar: Calendar | None = None,
) -> Series:
    """Zero-filled hit counts of a page (or of all pages of a site) per bucket in [start, end].

    Buckets are the site's local minutes, hours, days and months (its zone's, DST
    included); a naive ``start``/``end`` is the site's wall-clock time, an aware one an
    instant. Each bucket is labelled with its local start: an aware time with the
    site's offset, or a naive UTC time for a site in UTC (as before zones existed).
    """
    fields = read_fields(fields or hits_fields(), page)
    cal = calendar or (await site_config(db, site)).calendar
    lo, hi, d0, d1 = local_days(start, end, cal)
    coll, flt, proj = series_query(site, page, d0, d1, by, fields)
    acc: dict[int, int] = {}
    pruned: list[tuple[int, int]] = []  # UTC minute ranges [start, end) of days past retention
    async for doc in db[coll].find(flt, proj):
        items = _items(doc, by, fields)
        add_into(acc, items)
        if by in ("minute", "hour") and sum(n for _, n in items) < int(doc.get(fields.daily.total, 0)):
            day_start = _doc_start(doc, fields)
            pruned.append((day_start, cal.end(cal.day_of(day_start)[0])))
    keys = _buckets(by, lo, hi, d0, d1, cal)
    if by in ("minute", "hour"):
        out = [(cal.at(b), acc.get(b, 0)) for b in keys]
        flagged = frozenset(i for i, b in enumerate(keys) if any(s <= b < e for s, e in pruned))
    else:
        out = [(cal.day_start(date.fromordinal(b)), acc.get(b, 0)) for b in keys]
        flagged = frozenset()
    if cal.utc:  # a site in UTC answers naive UTC times, as it always has
        out = [(t.replace(tzinfo=None), n) for t, n in out]
    series = Series(out)
    series.pruned = flagged
    return series


class TopPages(list[tuple[str, int]]):
    """(page, hits), most first, and whether the ranking is proven exact.

    ``exact`` is false while a list of the range is still being written (the open day,
    or a day a worker has not sealed yet: :mod:`pipeline.kinds.hits.sites.seal`);
    ``bound`` is then the most hits a page missing from the rows could have.
    """

    exact: bool = True
    bound: int = 0
    #: How many leading rows are proven exact, each above every page after them (all, if exact).
    proven: int = 0


def month_spans(first: date, last: date) -> list[tuple[date, date, bool]]:
    """(first day, last day, whole month?) of each month the range touches."""
    out = []
    m = first.replace(day=1)
    while m <= last:
        end = (next_bucket(datetime(m.year, m.month, 1), "month") - timedelta(days=1)).date()
        out.append((max(m, first), min(end, last), first <= m and end <= last))
        m = end + timedelta(days=1)
    return out


async def _period_lists(
    db: AsyncDatabase[dict[str, Any]], site: str, first: date, last: date, r: RollupFields
) -> list[PeriodList]:
    """The top lists covering the range: a whole month's own list when it proves as much as
    its days' (complete, or sealed and unchanged), else the daily lists."""
    rd, rm = r.top_daily, r.top_monthly
    months = month_spans(first, last)
    lists: list[PeriodList] = []
    days: list[tuple[date, date]] = [(lo, hi) for lo, hi, whole in months if not whole]
    whole = [midnight(lo) for lo, _, whole in months if whole]
    if whole:
        flt = {f"{rm.metadata}.{rm.site}": site, f"{rm.metadata}.{rm.date}": {"$in": whole}}
        proj = {rm.pages: 1, rm.sealed: 1, rm.below: 1, f"{rm.metadata}.{rm.date}": 1, "_id": 0}
        async for doc in db[rm.collection].find(flt, proj):
            pl = PeriodList.of(doc.get(rm.pages), doc.get(rm.sealed), doc.get(rm.below))
            if pl.exact:
                lists.append(pl)
            else:
                month = doc[rm.metadata][rm.date].date()
                days.append((month, next_bucket(midnight(month), "month").date() - timedelta(days=1)))
    for lo, hi in days:
        flt = {
            f"{rd.metadata}.{rd.site}": site,
            f"{rd.metadata}.{rd.date}": {"$gte": midnight(lo), "$lte": midnight(hi)},
        }
        async for doc in db[rd.collection].find(flt, {rd.pages: 1, rd.sealed: 1, rd.below: 1, "_id": 0}):
            lists.append(PeriodList.of(doc.get(rd.pages), doc.get(rd.sealed), doc.get(rd.below)))
    return lists


async def page_totals(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    first: date,
    last: date,
    pages: list[str] | None,
    fields: HitsFields,
) -> dict[str, int]:
    """Exact hits of ``pages`` (``None``: every page) from their monthly documents, days in range.

    Named pages are read by ``_id`` (known from site, page and month): on the embedded
    store 100 documents took 27 ms by ``_id`` against 2.6 s with ``$in`` on the page
    field, which it answered by scanning the site's month; on MongoDB both use an index.
    """
    fm = fields.monthly
    out: dict[str, int] = {}
    proj = {f"{fm.metadata}.{fm.page}": 1, f"{fm.metadata}.{fm.date}": 1, fm.total: 1, fm.daily: 1, "_id": 0}
    if pages is None:
        flt = site_filter(fm, site, None, midnight(first.replace(day=1)), midnight(last.replace(day=1)))
        await _add_totals(db[fm.collection].find(flt, proj), first, last, fm, out)
        return out
    months = [lo.replace(day=1) for lo, _, _ in month_spans(first, last)]
    ids = [monthly_id(m, site, p) for p in pages for m in months]
    found = by_ids(db[fm.collection], ids, f"{fm.metadata}.{fm.site}", site, proj)
    await _add_totals(found, first, last, fm, out)
    return out


#: Document ids one read asks for.
IDS_PER_READ = 500


async def by_ids(
    coll: AsyncCollection[dict[str, Any]], ids: list[str], site_path: str, site: str, proj: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """Documents of one site by ``_id`` (:data:`IDS_PER_READ` a read), with the site's shard key."""
    for at in range(0, len(ids), IDS_PER_READ):
        async for doc in coll.find({"_id": {"$in": ids[at : at + IDS_PER_READ]}, site_path: site}, proj):
            yield doc


async def _add_totals(
    found: AsyncIterable[dict[str, Any]], first: date, last: date, fm: MonthlyFields, out: dict[str, int]
) -> None:
    """Add each monthly document's hits on the days from ``first`` to ``last`` to its page's."""
    async for doc in found:
        meta = doc[fm.metadata]
        month: date = meta[fm.date].date()
        end = next_bucket(midnight(month), "month").date() - timedelta(days=1)
        if first <= month and end <= last:
            n = int(doc.get(fm.total, 0))
        else:
            days = (doc.get(fm.daily) or {}).items()
            n = sum(int(c) for d, c in days if first <= month.replace(day=int(d)) <= last)
        out[meta[fm.page]] = out.get(meta[fm.page], 0) + n


async def top_pages(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    first: date,
    last: date,
    limit: int = 10,
    fields: HitsFields | None = None,
) -> TopPages:
    """The ``limit`` pages of ``site`` with the most hits from ``first`` to ``last`` (local days, inclusive).

    Exact, whatever order the hits arrived in, once the range's lists are sealed (a few
    seconds after their last write): reads the site's top lists (a whole month's, or its
    days') and the page documents of the few pages they leave open
    (:mod:`pipeline.kinds.hits.sites.rank`), never every page. Until then the rows are
    the best known and ``exact`` is false with the bound. ``limit`` 0: every page, from
    the page documents (or from the lists when they are complete). Most hits first,
    then by page.
    """
    fields = fields or hits_fields()
    lists = await _period_lists(db, site, first, last, fields.rollups)
    p = plan(lists, limit)
    counted: dict[str, int] = {}
    if p.unlisted or p.read or p.unread:
        if not limit:
            every = await page_totals(db, site, first, last, None, fields)
            rows = sorted(
                ((page, n) for page, n in every.items() if n),
                key=lambda row: (-row[1], row[0]),
            )
            every_page = TopPages(rows)
            every_page.proven = len(rows)
            return every_page
        if p.read:
            names = {unescape_key(k): k for k in p.read}
            totals = await page_totals(db, site, first, last, list(names), fields)
            counted = {names[page]: n for page, n in totals.items() if page in names}
            counted.update({k: 0 for k in p.read if k not in counted})
    ranked = rank(p, counted, limit)
    out = TopPages((unescape_key(k), n) for k, n in ranked.rows)
    out.exact, out.bound, out.proven = ranked.exact, ranked.bound, ranked.proven
    return out


async def require_site(
    db: AsyncDatabase[dict[str, Any]], site: str, fields: HitsFields | None = None, waiting: int = 0
) -> None:
    """Refuse a site that has neither hits nor settings, naming the known sites closest to it.

    A known site without data in a range answers zeros; a misspelt one answering zeros
    would look like a quiet day. One indexed read when the site has hits. ``waiting``:
    events of the topic not counted yet (negative: not known); while there may be some, an
    unknown site may be among them, and the answer (zeros, saying what waits) stands.
    The command line and the HTTP API ask; :func:`hits_series` and the library do not.
    """
    fields = fields or hits_fields()
    for f in (fields.rollups.monthly, fields.monthly):  # pages too: rollups may await a rebuild
        if await db[f.collection].find_one({f"{f.metadata}.{f.site}": site}, {"_id": 1}) is not None:
            return
    configs = await load(db)
    if site in configs:
        return
    if waiting:
        return
    known = sorted(set(await known_sites(db, fields)) | set(configs))
    close = difflib.get_close_matches(site, known, n=3, cutoff=0.6)
    if close:
        hint = f"the known sites closest to it: {', '.join(close)}"
    elif known:
        hint = f"known sites: {', '.join(known[:5])}{' ...' if len(known) > 5 else ''}"
    else:
        hint = "no site has hits yet"
    raise NotFound("site", f"unknown site {site!r}: {hint} (`preagg sites` lists them)")


async def known_sites(db: AsyncDatabase[dict[str, Any]], fields: HitsFields | None = None) -> list[str]:
    """Every site with hits, sorted: ``distinct`` on the monthly rollups' index's first field."""
    f = (fields or hits_fields()).rollups.monthly
    return sorted(await db[f.collection].distinct(f"{f.metadata}.{f.site}"))


async def site_months(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields | None = None
) -> dict[str, tuple[str, str]]:
    """Per site, its first and last month with hits (``YYYY-MM``): where its data is.

    One ``$group`` over the monthly rollups (one document per site and month): the
    dashboard opens on the latest month with data when the current one has none.
    """
    f = (fields or hits_fields()).rollups.monthly
    pipeline: list[dict[str, Any]] = [
        {"$match": {f.total: {"$gt": 0}}},
        {
            "$group": {
                "_id": f"${f.metadata}.{f.site}",
                "first": {"$min": f"${f.metadata}.{f.date}"},
                "last": {"$max": f"${f.metadata}.{f.date}"},
            }
        },
    ]
    out = {}
    async for doc in await db[f.collection].aggregate(pipeline):
        out[doc["_id"]] = (f"{doc['first']:%Y-%m}", f"{doc['last']:%Y-%m}")
    return out


async def listed_sites(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields | None = None
) -> list[SiteConfig]:
    """Every site with hits or settings, sorted, with its settings (``preagg sites``, ``/api/sites``)."""
    configs = await load(db)
    names = sorted(set(await known_sites(db, fields)) | set(configs))
    return [configs.get(n) or SiteConfig(n) for n in names]


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


async def site_day_range(
    db: AsyncDatabase[dict[str, Any]], site: str, first: date, last: date | None
) -> tuple[date, date]:
    """A ``from``/``to`` range of days in the site's calendar: ``today`` (``today-7d``) is the
    site's today; ``last`` missing is ``first`` (the CLI and the API read ranges the same way)."""
    from pipeline.core.params import local_day

    today = (await site_config(db, site)).calendar.today()
    start = local_day(first, today)
    return start, local_day(last, today) if last else start
