"""Hit counting: (site, page, minute) → count in memory, planned into daily/monthly upserts.

Documents follow the seed "Pre-Aggregated Reports": one per site/page/day with a day
total, ``hourly.<h>`` and ``minute.<h>.<m>`` (minutes nested by hour), and one per
site/page/month with a month total and ``daily.<d>``. Each touched document gets
exactly one upsert per flush, whatever number of events touched it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Protocol

from pipeline.core.rejection import Rejection
from pipeline.core.times import minute_of
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import HitsFields, daily_id, monthly_id

Key = tuple[str, str, int]
"""(site, page, minute since the epoch, UTC)."""

DayKey = tuple[str, str, int]
"""(site, page, day since the epoch, UTC)."""

PropCounts = dict[DayKey, dict[tuple[str, str], int]]
"""Per (site, page, day), hits per property (name, value)."""

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


class PropKeySource(Protocol):
    """Counter keys of resolved custom properties (:class:`pipeline.kinds.hits.props.PropKeys`)."""

    def keys(self, site: str, name: str, value: str) -> tuple[str, str]: ...


class HitCounts:
    """The initialize/agg/result aggregator of hits for one flush window.

    Custom properties are counted by their text here; their stored keys (name-store
    tokens) are resolved by the flush before :meth:`plan` (see :meth:`prop_pairs`).
    """

    __slots__ = ("counts", "days", "decoder", "fields", "prop_keys", "props", "props_pending")

    def __init__(
        self, decoder: HitDecoder, fields: HitsFields, prop_keys: PropKeySource | None = None
    ) -> None:
        self.decoder = decoder
        self.fields = fields
        self.prop_keys = prop_keys
        self.counts: dict[Key, int] = {}
        self.props: PropCounts = {}
        self.props_pending = 0
        #: (site, page, day) of every daily document touched: :meth:`documents` in O(1).
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
            self.days.add((site, page, minute // 1440))
        else:
            counts[key] = n + 1
        if props:
            dk = (site, page, minute // 1440)
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
        return plan_hits(self.counts, self.fields, self.props, self.prop_keys)


def plan_hits(
    counts: Mapping[Key, int],
    fields: HitsFields,
    props: Mapping[DayKey, Mapping[tuple[str, str], int]] | None = None,
    prop_keys: PropKeySource | None = None,
) -> list[DocUpdate]:
    """Group minute counts into one upsert per daily and per monthly document.

    Property counts go to the daily documents (which every counted hit touches).
    """
    fd, fm = fields.daily, fields.monthly
    daily: dict[tuple[str, str, int], DocUpdate] = {}
    monthly: dict[tuple[str, str, int, int], DocUpdate] = {}
    for (site, page, minute), n in counts.items():
        day_index, minute_of_day = divmod(minute, 1440)
        hour, minute_of_hour = divmod(minute_of_day, 60)
        dk = (site, page, day_index)
        upd = daily.get(dk)
        day = date.fromordinal(_EPOCH_ORDINAL + day_index)
        if upd is None:
            # site and page are the shard key: equalities of the filter (an upsert inserts them);
            # the date is set on insert by its dotted path, so the two never conflict.
            upd = daily[dk] = DocUpdate(
                fd.collection,
                daily_id(day, site, page),
                {f"{fd.metadata}.{fd.date}": datetime(day.year, day.month, day.day)},
                key={f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.page}": page},
            )
        upd.add(fd.total, n)
        upd.add(f"{fd.hourly}.{hour}", n)
        upd.add(f"{fd.minute}.{hour}.{minute_of_hour}", n)
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
        for (site, page, day_index), pairs in props.items():
            upd = daily[(site, page, day_index)]
            for (name, value), n in pairs.items():
                nk, vk = prop_keys.keys(site, name, value)
                upd.add(f"{fd.props}.{nk}.{vk}", n)
    return [*daily.values(), *monthly.values()]
