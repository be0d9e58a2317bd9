"""Hit counting: (site, page, UTC minute) → count in memory, planned into daily/monthly upserts.

Documents follow the seed "Pre-Aggregated Reports": one per site/page/day with a day
total, ``hourly.<h>`` and ``minute.<h>.<m>`` (minutes nested by hour), and one per
site/page/month with a month total and ``daily.<d>``. Each touched document gets
exactly one upsert per flush, whatever number of events touched it.

Days and months are the site's local ones (:mod:`pipeline.core.calendar`): counts are
kept by UTC minute and placed in local days only when planned, with the zones read
for that flush. ``h`` and ``m`` count hours and minutes elapsed since the local day's
start, so the 25th hour of a DST day has a counter of its own. Counters of a day past
its retention tier are not written (:mod:`pipeline.kinds.hits.sites.tiers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from typing import Protocol

import xxhash

from pipeline.core.calendar import SLOT, UTC_CALENDAR, Calendar, minute_dt
from pipeline.core.rejection import Rejection
from pipeline.core.times import minute_of
from pipeline.core.uniques import Budget
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import (
    DailyFields,
    HitsFields,
    daily_id,
    monthly_id,
    register_fields,
    site_daily_id,
    site_monthly_id,
)
from pipeline.kinds.hits.sites.caps import PageCaps, unlimited
from pipeline.kinds.hits.sites.tiers import NOTHING_PRUNED, Pruned
from pipeline.kinds.hits.visitors import ident_hash
from pipeline.kinds.hits.visits import Visits, add_visitors

Key = tuple[str, str, int]
"""(site, page, minute since the epoch, UTC)."""

DayKey = tuple[str, str, int]
"""(site, page, local date ordinal): one daily document."""

SlotKey = tuple[str, str, int]
"""(site, page, UTC quarter hour since the epoch): properties are kept this fine so that
they land in the right local day (every zone's midnight is on a quarter hour)."""

PropCounts = dict[SlotKey, dict[tuple[str, str], int]]
"""Per (site, page, quarter hour), hits per property (name, value)."""


class Calendars(Protocol):
    """Each site's local calendar and retention (:class:`pipeline.kinds.hits.sites.cache.SiteConfigs`)."""

    def calendar(self, site: str) -> Calendar: ...

    def retention(self) -> Pruned: ...


class UtcCalendars:
    """Every site in UTC, every counter kept (tests, benchmarks, the audit)."""

    def calendar(self, site: str) -> Calendar:
        return UTC_CALENDAR

    def retention(self) -> Pruned:
        return NOTHING_PRUNED


UTC_SITES = UtcCalendars()


class PropKeySource(Protocol):
    """Counter keys of resolved custom properties (:class:`pipeline.kinds.hits.props.PropKeys`)."""

    def keys(self, site: str, name: str, value: str) -> tuple[str, str]: ...


class HitCounts:
    """The initialize/agg/result aggregator of hits for one flush window.

    Custom properties are counted by their text here; their stored keys (name-store
    tokens) are resolved by the flush before :meth:`plan` (see :meth:`prop_pairs`).
    """

    __slots__ = (
        "_assumed",
        "_refused",
        "calendars",
        "caps",
        "counts",
        "days",
        "decoder",
        "fields",
        "prop_keys",
        "props",
        "props_pending",
        "site_days",
        "visit_entries",
        "visit_partitions",
        "visitor_budget",
        "visitor_keys",
        "visits",
    )

    def __init__(
        self,
        decoder: HitDecoder,
        fields: HitsFields,
        prop_keys: PropKeySource | None = None,
        calendars: Calendars = UTC_SITES,
        caps: PageCaps | None = None,
        visitor_keys: Callable[[int], bytes] | None = None,
        visitor_budget: Budget | None = None,
    ) -> None:
        self.decoder = decoder
        #: Pages per day and top pages (:mod:`pipeline.kinds.hits.sites.caps`), shared by a worker's windows.
        self.caps = caps if caps is not None else unlimited()
        #: The page-cap refusals of the last plan (:meth:`decisions`), and those a redo assumes.
        self._refused: set[bytes] = set()
        self._assumed: frozenset[bytes] | None = None
        self.fields = fields
        self.prop_keys = prop_keys
        self.calendars = calendars
        self.counts: dict[Key, int] = {}
        self.props: PropCounts = {}
        self.props_pending = 0
        #: (site, page, local day) of every daily document touched: :meth:`documents` in O(1).
        #: Local days by the zones known at ingest; the plan uses those of its flush,
        #: which differ only for a zone change announced an hour ahead (an estimate).
        self.days: set[DayKey] = set()
        #: (site, local day) of every site rollup touched.
        self.site_days: set[tuple[str, int]] = set()
        #: Per (site, page, quarter hour) the visitors seen (:mod:`pipeline.kinds.hits.visits`),
        #: and how many (site, page, quarter hour, visitor) entries that is (memory).
        self.visits: Visits = {}
        self.visit_entries = 0
        #: The source partitions of those visitors: one (an idempotent-writes batch keeps an
        #: aggregate per partition), and its sketches' registers are that partition's documents.
        self.visit_partitions: set[int] = set()
        #: Local day ordinal → the key of its visitor hashes (:mod:`pipeline.kinds.hits.salt`).
        self.visitor_keys = visitor_keys
        #: What this worker wrote to each sketch holder, across its flushes.
        self.visitor_budget = visitor_budget if visitor_budget is not None else Budget()

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Count one encoded hit; a rejection is returned, not raised."""
        got = self.decoder.decode_visit(raw)
        if isinstance(got, Rejection):
            return got
        (site, page, ts, props), who = got
        minute = minute_of(ts)
        key = (site, page, minute)
        counts = self.counts
        n = counts.get(key)
        if n is None:
            counts[key] = 1
            ordinal = self.calendars.calendar(site).day_of(minute)[0]
            self.days.add((site, page, ordinal))
            self.site_days.add((site, ordinal))
        else:
            counts[key] = n + 1
        if props:
            dk = (site, page, minute // SLOT)
            pairs = self.props.get(dk)
            if pairs is None:
                pairs = self.props[dk] = {}
            for pair in props:
                n = pairs.get(pair)
                if n is None:
                    pairs[pair] = 1
                    self.props_pending += 1
                else:
                    pairs[pair] = n + 1
        if who is not None:
            vk = (site, page, minute // SLOT)
            seen = self.visits.get(vk)
            if seen is None:
                seen = self.visits[vk] = set()
            self.visit_partitions.add(partition)
            ident = ident_hash(site, who)
            if ident not in seen:
                seen.add(ident)
                self.visit_entries += 1
        return None

    def __len__(self) -> int:
        return len(self.counts) + self.props_pending + self.visit_entries

    def documents(self) -> int:
        """Daily documents touched, twice (each has at most one monthly document), pages' and sites'.

        A site's day has two (its rollup and its top pages), and so has its month.
        """
        return 2 * len(self.days) + 4 * len(self.site_days)

    def periods(self) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
        """(site, local day ordinal) and (site, month's first day ordinal) this window touches."""
        days = set(self.site_days)
        months = {(site, ordinal - date.fromordinal(ordinal).day + 1) for site, ordinal in days}
        return days, months

    def visited(self) -> dict[tuple[str, int], set[str]]:
        """Per (site, local day ordinal) the pages this window has visitors of (their counts to refresh)."""
        out: dict[tuple[str, int], set[str]] = {}
        for site, page, slot in self.visits:
            ordinal = self.calendars.calendar(site).day_of(slot * SLOT)[0]
            out.setdefault((site, ordinal), set()).add(page)
        return out

    def prop_pairs(self) -> dict[str, set[tuple[str, str]]]:
        """Per site, the (name, value) pairs this window counts: what the name store must resolve."""
        out: dict[str, set[tuple[str, str]]] = {}
        for (site, _, _), pairs in self.props.items():
            out.setdefault(site, set()).update(pairs)
        return out

    def plan(self) -> list[DocUpdate]:
        """The upserts that add this window's counts to MongoDB."""
        if self.props and self.prop_keys is None:
            raise RuntimeError("hits with properties need a name store (prop_keys)")
        if self.visits and self.visitor_keys is None:
            raise RuntimeError("hits with visitors need the visitor keys (visitor_keys)")
        now = datetime.now(UTC)
        today = datetime(now.year, now.month, now.day)
        self._refused = set()
        return plan_hits(
            self.counts,
            self.fields,
            self.props,
            self.prop_keys,
            self.calendars,
            self.caps,
            today,
            refused=self._assumed,
            record=self._refused,
            visits=self.visits,
            visitor_keys=self.visitor_keys,
            budget=self.visitor_budget,
            writer=next(iter(self.visit_partitions)) if len(self.visit_partitions) == 1 else None,
        )

    def decisions(self) -> bytes | None:
        """What the last plan decided from this worker's state alone: the pages it refused a
        document of their own (past the day's cap), and the visitor sketches it wrote as
        registers (:func:`~pipeline.core.uniques.holder_key`). A flush's intent records it, so
        that a redo of its range on another worker decides exactly so (docs/exactly-once.md)."""
        return encode_refusals(self._refused) if self._refused else None

    def assume(self, decisions: bytes | None) -> None:
        """Plan as the flush that recorded ``decisions`` did (``None``: it refused no page)."""
        self._assumed = decode_refusals(decisions or b"")


def cap_key(site: str, page: str, ordinal: int) -> bytes:
    """8 bytes naming a (site, page, local day) in a flush's recorded page-cap refusals."""
    return xxhash.xxh64_digest(f"{site}\x00{page}\x00{ordinal}".encode("utf-8", "surrogatepass"))


def encode_refusals(keys: Iterable[bytes]) -> bytes:
    """A flush's page-cap refusals as one byte string (sorted 8-byte keys)."""
    return b"".join(sorted(keys))


def decode_refusals(raw: bytes) -> frozenset[bytes]:
    return frozenset(raw[i : i + 8] for i in range(0, len(raw), 8))


def plan_hits(
    counts: Mapping[Key, int],
    fields: HitsFields,
    props: Mapping[SlotKey, Mapping[tuple[str, str], int]] | None = None,
    prop_keys: PropKeySource | None = None,
    calendars: Calendars = UTC_SITES,
    caps: PageCaps | None = None,
    written: datetime | None = None,
    refused: frozenset[bytes] | None = None,
    record: set[bytes] | None = None,
    visits: Visits | None = None,
    visitor_keys: Callable[[int], bytes] | None = None,
    budget: Budget | None = None,
    writer: int | None = None,
) -> list[DocUpdate]:
    """Group minute counts into one upsert per daily and monthly document, pages' and sites'.

    Each site's minutes go to its local days (``calendars``); a day a retention run has
    pruned (or is about to) gets no counters of that tier. Property counts go to the
    daily documents (which every counted hit touches). Every count also goes to its
    site's rollups (``hits_site_daily``, ``hits_site_monthly``); a page past the day's
    cap (``caps``) goes only there, under ``(other)`` in the top pages. ``written``
    (today's UTC midnight) is set on every daily document: the workers' periodic
    retention runs do not prune what was written within its tier (a backfill).

    ``refused``: the pages refused a document (:func:`cap_key`) by the flush this plan
    writes again; when given, exactly those are refused, whatever ``caps`` says now (a
    redo decides as its flush did). ``record`` collects the keys this plan refuses.

    ``visits``: the window's visitors, added to the same documents' sketches
    (:func:`~pipeline.kinds.hits.visits.add_visitors`) with ``visitor_keys`` (local day
    ordinal → key) and ``budget``; ``writer``: their one source partition, if one.
    """
    fd, fm = fields.daily, fields.monthly
    rd, rm = fields.rollups.daily, fields.rollups.monthly
    td, tm = fields.rollups.top_daily, fields.rollups.top_monthly
    caps = caps if caps is not None else unlimited()
    retention = calendars.retention()
    daily: dict[tuple[str, str, int], DocUpdate] = {}
    monthly: dict[tuple[str, str, int, int], DocUpdate] = {}
    site_daily: dict[tuple[str, int], DocUpdate] = {}
    site_monthly: dict[tuple[str, int, int], DocUpdate] = {}
    tops: dict[tuple[str, str, int], DocUpdate] = {}
    keeps: dict[tuple[str, int], tuple[bool, bool]] = {}
    stamp: dict[str, object] = {fd.written: written} if written is not None else {}
    admitted: dict[tuple[str, str, int], bool] = {}

    def day_meta(f: DailyFields, cal: Calendar, ordinal: int, start: int) -> dict[str, object]:
        day = date.fromordinal(ordinal)
        # site (and page) are the shard key: equalities of the filter (an upsert inserts them);
        # the date is set on insert by its dotted path, so the two never conflict.
        meta: dict[str, object] = {f"{f.metadata}.{f.date}": datetime(day.year, day.month, day.day)}
        if not cal.utc:  # a local day: when it starts (UTC) and in which zone
            meta[f"{f.metadata}.{f.start}"] = minute_dt(start).replace(tzinfo=None)
            meta[f"{f.metadata}.{f.zone}"] = cal.zone_of_day(ordinal)
            meta[f"{f.metadata}.{f.length}"] = -(-(cal.end(ordinal) - start) // 60)
        return meta

    def daily_doc(site: str, page: str, cal: Calendar, ordinal: int, start: int) -> DocUpdate:
        upd = daily.get((site, page, ordinal))
        if upd is None:
            upd = daily[site, page, ordinal] = DocUpdate(
                fd.collection,
                daily_id(date.fromordinal(ordinal), site, page),
                day_meta(fd, cal, ordinal, start),
                key={f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.page}": page},
                max=dict(stamp),
            )
        return upd

    def site_daily_doc(site: str, cal: Calendar, ordinal: int, start: int) -> DocUpdate:
        upd = site_daily.get((site, ordinal))
        if upd is None:
            upd = site_daily[site, ordinal] = DocUpdate(
                rd.collection,
                site_daily_id(date.fromordinal(ordinal), site),
                day_meta(rd, cal, ordinal, start),
                key={f"{rd.metadata}.{rd.site}": site},
                max=dict(stamp),
            )
        return upd

    def top_doc(site: str, period: str, day: date) -> DocUpdate:
        key = (site, period, day.toordinal())
        upd = tops.get(key)
        if upd is None:
            f, doc_id = (td, site_daily_id(day, site)) if period == "d" else (tm, site_monthly_id(day, site))
            upd = tops[key] = DocUpdate(
                f.collection,
                doc_id,
                {f"{f.metadata}.{f.date}": datetime(day.year, day.month, day.day)},
                key={f"{f.metadata}.{f.site}": site},
            )
        return upd

    def admits(site: str, page: str, ordinal: int) -> bool:
        ok = admitted.get((site, page, ordinal))
        if ok is None:
            if refused is not None:
                ok = cap_key(site, page, ordinal) not in refused
            else:
                ok = caps.admits(site, ordinal, page)
            if not ok and record is not None:
                record.add(cap_key(site, page, ordinal))
            admitted[site, page, ordinal] = ok
        return ok

    # Each cell's page-day, and the page-day's events: minutes, totals and top pages below
    # are added per cell or per page-day from these, each counter first appearing where a
    # per-cell pass puts it (the order of an update's fields, which split_wide's parts follow).
    page_days: dict[tuple[str, str, int], list[int]] = {}
    cells: list[tuple[tuple[str, str, int], list[int], int, int]] = []
    for (site, page, minute), n in counts.items():
        ordinal, start = calendars.calendar(site).day_of(minute)
        pk = (site, page, ordinal)
        pd = page_days.get(pk)
        if pd is None:
            pd = page_days[pk] = [0, start]  # events, the day's start minute
        pd[0] += n
        cells.append((pk, pd, minute - start, n))
    # The batch's busiest pages take their place in the top lists first (a backfill's
    # batch of a whole day then lists that day's busiest pages, whatever their order).
    busy: dict[tuple[str, str, int], dict[str, int]] = {}
    for (site, page, ordinal), (n, *_) in page_days.items():
        if admits(site, page, ordinal):
            month_ordinal = ordinal - date.fromordinal(ordinal).day + 1
            for period in ((site, "d", ordinal), (site, "m", month_ordinal)):
                pages = busy.setdefault(period, {})
                pages[page] = pages.get(page, 0) + n
    for period, pages in busy.items():
        for page in sorted(pages, key=lambda p: (-pages[p], p)):
            caps.top_key(period, page)
    hourly_f, minute_f, total_f = fd.hourly, fd.minute, fd.total
    # (site's day, page's day or None: refused, hourly kept, minute kept) per page-day
    targets_of: dict[tuple[str, str, int], tuple[DocUpdate, DocUpdate | None, bool, bool]] = {}
    for pk, pd, at, n in cells:
        got = targets_of.get(pk)
        if got is None:
            site, page, ordinal = pk
            keep = keeps.get((site, ordinal))
            if keep is None:
                keep = keeps[site, ordinal] = retention.keeps(site, ordinal)
            cal = calendars.calendar(site)
            site_day = site_daily_doc(site, cal, ordinal, pd[1])
            own = admits(site, page, ordinal)
            if not own:
                site_day.inc.setdefault(rd.capped, 0)
            site_day.inc.setdefault(total_f, 0)
            page_day = daily_doc(site, page, cal, ordinal, pd[1]) if own else None
            if page_day is not None:
                page_day.inc.setdefault(total_f, 0)
            got = targets_of[pk] = (site_day, page_day, keep[1], keep[0])
        site_day, page_day, hourly_kept, minute_kept = got
        hour, minute_of_hour = divmod(at, 60)
        if page_day is None:
            caps.count_capped(n)
            site_day.add(rd.capped, n)
        if hourly_kept:
            path = f"{hourly_f}.{hour}"
            site_day.add(path, n)
            if page_day is not None:
                page_day.add(path, n)
        if minute_kept:
            mpath = f"{minute_f}.{hour}.{minute_of_hour}"
            site_day.add(mpath, n)
            if page_day is not None:
                page_day.add(mpath, n)
    for (site, page, ordinal), (n, *_) in page_days.items():
        site_day, page_day, *_ = targets_of[site, page, ordinal]
        own = page_day is not None
        site_day.add(total_f, n)
        if page_day is not None:
            page_day.add(total_f, n)
        day = date.fromordinal(ordinal)
        month_ordinal = ordinal - day.day + 1
        shown = page if own else None
        top_doc(site, "d", day).add(f"{td.pages}.{caps.top_key((site, 'd', ordinal), shown)}", n)
        mupd = site_monthly.get((site, day.year, day.month))
        if mupd is None:
            mupd = site_monthly[site, day.year, day.month] = DocUpdate(
                rm.collection,
                site_monthly_id(day, site),
                {f"{rm.metadata}.{rm.date}": datetime(day.year, day.month, 1)},
                key={f"{rm.metadata}.{rm.site}": site},
            )
        mupd.add(rm.total, n)
        mupd.add(f"{rm.daily}.{day.day}", n)
        top_doc(site, "m", day.replace(day=1)).add(
            f"{tm.pages}.{caps.top_key((site, 'm', month_ordinal), shown)}", n
        )
        if not own:
            continue
        mk = (site, page, day.year, day.month)
        mupd = monthly.get(mk)
        if mupd is None:
            mupd = monthly[mk] = DocUpdate(
                fm.collection,
                monthly_id(day, site, page),
                {f"{fm.metadata}.{fm.date}": datetime(day.year, day.month, 1)},
                key={f"{fm.metadata}.{fm.site}": site, f"{fm.metadata}.{fm.page}": page},
            )
        mupd.add(fm.total, n)
        mupd.add(f"{fm.daily}.{day.day}", n)
    if visits and visitor_keys is not None:

        def visit_targets(site: str, page: str, slot: int) -> tuple[int, list[tuple[DocUpdate, str]]]:
            cal = calendars.calendar(site)
            ordinal, start = cal.day_of(slot * SLOT)
            hour = (slot * SLOT - start) // 60
            keep = keeps.get((site, ordinal))
            if keep is None:
                keep = keeps[site, ordinal] = retention.keeps(site, ordinal)
            day = date.fromordinal(ordinal)
            docs = [site_daily_doc(site, cal, ordinal, start)]
            monthly_docs = [site_monthly.get((site, day.year, day.month))]
            if admits(site, page, ordinal):
                docs.append(daily_doc(site, page, cal, ordinal, start))
                monthly_docs.append(monthly.get((site, page, day.year, day.month)))
            out = []
            for upd in docs:
                out.append((upd, fd.visitors))
                if keep[1]:
                    out.append((upd, f"{fd.hourly_visitors}.{hour}"))
            out.extend((m, fm.visitors) for m in monthly_docs if m is not None)
            return ordinal, out

        extra = add_visitors(
            visits,
            visit_targets,
            visitor_keys,
            budget if budget is not None else Budget(),
            refused,
            record,
            register_fields(fields.mode),
            writer,
            lambda upd, path: (
                upd.collection in (rd.collection, rm.collection) and path in (rd.visitors, rm.visitors)
            ),
        )
    else:
        extra = []
    if props and prop_keys is not None:
        for (site, page, slot), pairs in props.items():
            cal = calendars.calendar(site)
            ordinal, start = cal.day_of(slot * SLOT)
            targets = [site_daily_doc(site, cal, ordinal, start)]
            if admits(site, page, ordinal):
                targets.append(daily_doc(site, page, cal, ordinal, start))
            for (name, value), n in pairs.items():
                nk, vk = prop_keys.keys(site, name, value)
                for upd in targets:
                    upd.add(f"{fd.props}.{nk}.{vk}", n)
    return [
        *daily.values(),
        *monthly.values(),
        *site_daily.values(),
        *site_monthly.values(),
        *tops.values(),
        *extra,
    ]
