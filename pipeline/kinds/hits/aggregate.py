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

from collections.abc import Mapping
from datetime import date, datetime
from typing import Protocol

from pipeline.core.calendar import SLOT, UTC_CALENDAR, Calendar, minute_dt
from pipeline.core.rejection import Rejection
from pipeline.core.times import minute_of
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import HitsFields, daily_id, monthly_id
from pipeline.kinds.hits.sites.tiers import NOTHING_PRUNED, Pruned

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
        "calendars",
        "counts",
        "days",
        "decoder",
        "fields",
        "prop_keys",
        "props",
        "props_pending",
    )

    def __init__(
        self,
        decoder: HitDecoder,
        fields: HitsFields,
        prop_keys: PropKeySource | None = None,
        calendars: Calendars = UTC_SITES,
    ) -> None:
        self.decoder = decoder
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

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Count one encoded hit; a rejection is returned, not raised."""
        hit = self.decoder.decode(raw)
        if isinstance(hit, Rejection):
            return hit
        site, page, ts, props = hit
        minute = minute_of(ts)
        key = (site, page, minute)
        counts = self.counts
        n = counts.get(key)
        if n is None:
            counts[key] = 1
            self.days.add((site, page, self.calendars.calendar(site).day_of(minute)[0]))
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
        return None

    def __len__(self) -> int:
        return len(self.counts) + self.props_pending

    def documents(self) -> int:
        """Daily documents touched, twice: each has at most one monthly document."""
        return 2 * len(self.days)

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
        return plan_hits(self.counts, self.fields, self.props, self.prop_keys, self.calendars)


def plan_hits(
    counts: Mapping[Key, int],
    fields: HitsFields,
    props: Mapping[SlotKey, Mapping[tuple[str, str], int]] | None = None,
    prop_keys: PropKeySource | None = None,
    calendars: Calendars = UTC_SITES,
) -> list[DocUpdate]:
    """Group minute counts into one upsert per daily and per monthly document.

    Each site's minutes go to its local days (``calendars``); a day a retention run has
    pruned (or is about to) gets no counters of that tier. Property
    counts go to the daily documents (which every counted hit touches).
    """
    fd, fm = fields.daily, fields.monthly
    retention = calendars.retention()
    daily: dict[tuple[str, str, int], DocUpdate] = {}
    monthly: dict[tuple[str, str, int, int], DocUpdate] = {}
    keeps: dict[tuple[str, int], tuple[bool, bool]] = {}

    def daily_doc(site: str, page: str, cal: Calendar, ordinal: int, start: int) -> DocUpdate:
        upd = daily.get((site, page, ordinal))
        if upd is None:
            day = date.fromordinal(ordinal)
            # site and page are the shard key: equalities of the filter (an upsert inserts them);
            # the date is set on insert by its dotted path, so the two never conflict.
            meta: dict[str, object] = {f"{fd.metadata}.{fd.date}": datetime(day.year, day.month, day.day)}
            if not cal.utc:  # a local day: when it starts (UTC) and in which zone
                meta[f"{fd.metadata}.{fd.start}"] = minute_dt(start).replace(tzinfo=None)
                meta[f"{fd.metadata}.{fd.zone}"] = cal.zone_of_day(ordinal)
            upd = daily[site, page, ordinal] = DocUpdate(
                fd.collection,
                daily_id(day, site, page),
                meta,
                key={f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.page}": page},
            )
        return upd

    for (site, page, minute), n in counts.items():
        cal = calendars.calendar(site)
        ordinal, start = cal.day_of(minute)
        hour, minute_of_hour = divmod(minute - start, 60)
        upd = daily_doc(site, page, cal, ordinal, start)
        upd.add(fd.total, n)
        keep = keeps.get((site, ordinal))
        if keep is None:
            keep = keeps[site, ordinal] = retention.keeps(site, ordinal)
        if keep[1]:
            upd.add(f"{fd.hourly}.{hour}", n)
        if keep[0]:
            upd.add(f"{fd.minute}.{hour}.{minute_of_hour}", n)
        day = date.fromordinal(ordinal)
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
    if props and prop_keys is not None:
        for (site, page, slot), pairs in props.items():
            cal = calendars.calendar(site)
            upd = daily_doc(site, page, cal, *cal.day_of(slot * SLOT))
            for (name, value), n in pairs.items():
                nk, vk = prop_keys.keys(site, name, value)
                upd.add(f"{fd.props}.{nk}.{vk}", n)
    return [*daily.values(), *monthly.values()]
