"""A site's local calendar: its days and months in its IANA time zone, DST-exact (pure).

A site's zone history is a list of changes: its first zone from the beginning, then
each later zone *from* a local date on. A change takes effect at the new zone's
local midnight of that date (its *boundary*), so every local day from the change on
starts at a local midnight, and the day before it runs in the old zone up to the
boundary (shorter or longer than 24 hours, once).

A local day is the interval ``[start, next start)`` of UTC minutes whose local date
(in the zone in effect) is that day: 24 hours, or 23/25 hours (23.5/24.5 on
Lord Howe) at a DST change. Counters inside a day are *elapsed* minutes and hours
since its start, so a 25-hour day has hours 0-24 and a repeated wall-clock hour is
never merged with its twin; :meth:`Calendar.at` turns an elapsed index back into
an aware local time with its offset.

Everything is in whole UTC minutes since the epoch (what the aggregators key on).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipeline.core.errors import InputError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
#: Slots of this many minutes are memoised whole when no day starts inside them (every
#: zone since 1980 has offsets and changes on quarter hours).
SLOT = 15
#: Memoised slots per calendar before the memo is dropped (96 per day: 10,000 ≈ 100 days).
MEMO_LIMIT = 10_000


class ZoneError(InputError):
    """Not an IANA time zone name, or a zone history out of order."""


@cache
def zone_info(name: str) -> tzinfo:
    """The ``tzinfo`` of an IANA name (``UTC`` is :data:`datetime.UTC`)."""
    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ZoneError(f"{name!r} is not an IANA time zone (Europe/Berlin, Asia/Kolkata, ...)") from None


def check_zone(name: str) -> str:
    """``name`` if it is an IANA time zone, else :class:`ZoneError`."""
    zone_info(name)
    return name


def minute_dt(minute: int) -> datetime:
    """Aware UTC datetime of a UTC minute since the epoch."""
    return EPOCH + timedelta(minutes=minute)


def dt_minute(dt: datetime) -> int:
    """UTC minute since the epoch of an aware datetime (naive is taken as UTC), floored."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int((dt - EPOCH).total_seconds() // 60)


def _local_date(minute: int, tz: tzinfo) -> date:
    return minute_dt(minute).astimezone(tz).date()


def _midnight(day: date, tz: tzinfo) -> int:
    """First UTC minute whose local date in ``tz`` is ``day`` (or later, when ``day`` is skipped)."""
    if tz is UTC:
        return (day.toordinal() - EPOCH_ORDINAL) * 1440
    naive = datetime(day.year, day.month, day.day)
    found = []
    for fold in (0, 1):
        m = dt_minute(naive.replace(tzinfo=tz, fold=fold))
        if _local_date(m, tz) >= day > _local_date(m - 1, tz):
            found.append(m)
    if found:
        return min(found)
    # Not met since 1900; kept exact anyway: walk from a day before, an hour then a minute at a time.
    m = dt_minute(datetime(day.year, day.month, day.day, tzinfo=UTC)) - 36 * 60
    while _local_date(m + 60, tz) < day:
        m += 60
    while _local_date(m, tz) < day:
        m += 1
    return m


@dataclass(frozen=True)
class ZoneChange:
    """From local date ``since`` on (``None``: from the beginning) the site is in ``zone``."""

    since: date | None
    zone: str


class Calendar:
    """A site's local days: which day holds a UTC minute, when a day starts and ends."""

    def __init__(self, changes: Sequence[ZoneChange] = ()) -> None:
        changes = list(changes) or [ZoneChange(None, "UTC")]
        if changes[0].since is not None:
            changes.insert(0, ZoneChange(None, "UTC"))
        for before, after in itertools.pairwise(changes[1:]):
            if before.since is None or after.since is None or after.since <= before.since:
                raise ZoneError("zone changes must have increasing dates")
        self.changes = tuple(changes)
        self.zones = tuple(zone_info(c.zone) for c in changes)
        #: The first local date of each later zone, and the UTC minute it starts at.
        self.sinces: list[int] = [c.since.toordinal() for c in changes[1:] if c.since is not None]
        self.bounds: list[int] = [
            _midnight(c.since, z) for c, z in zip(changes[1:], self.zones[1:], strict=True) if c.since
        ]
        for i, bound in enumerate(self.bounds):
            since = self.sinces[i]
            if bound <= _midnight(date.fromordinal(since - 1), self.zones[i]):
                raise ZoneError(
                    f"{changes[i].zone} -> {changes[i + 1].zone} from {date.fromordinal(since)} would leave "
                    "the day before it empty: change through a zone in between, a day apart"
                )
        self.utc = len(changes) == 1 and self.zones[0] is UTC
        self._slots: dict[int, tuple[int, int]] = {}
        self._starts: dict[int, int] = {}

    @property
    def zone(self) -> str:
        """The zone in effect now (the last change)."""
        return self.changes[-1].zone

    def zone_of_day(self, ordinal: int) -> str:
        """The zone of the local day ``ordinal`` (``date.toordinal()``)."""
        return self.changes[bisect.bisect_right(self.sinces, ordinal)].zone

    def _tz_of_day(self, ordinal: int) -> tzinfo:
        return self.zones[bisect.bisect_right(self.sinces, ordinal)]

    def day_of(self, minute: int) -> tuple[int, int]:
        """(local date ordinal, its start minute) of the day holding UTC ``minute``."""
        if self.utc:
            d = minute // 1440
            return d + EPOCH_ORDINAL, d * 1440
        slot = minute // SLOT
        hit = self._slots.get(slot)
        if hit is not None:
            return hit
        first, last = self._day_of(slot * SLOT), self._day_of(slot * SLOT + SLOT - 1)
        if first != last:  # a day starts inside this slot (an offset off the quarter hour)
            return self._day_of(minute)
        if len(self._slots) >= MEMO_LIMIT:
            self._slots.clear()
        self._slots[slot] = first
        return first

    def _day_of(self, minute: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.bounds, minute)
        ordinal = _local_date(minute, self.zones[i]).toordinal()
        if i < len(self.sinces) and ordinal >= self.sinces[i]:
            ordinal = self.sinces[i] - 1  # the old zone's last day runs up to the change
        return ordinal, self.start(ordinal)

    def start(self, ordinal: int) -> int:
        """UTC minute the local day ``ordinal`` starts at."""
        if self.utc:
            return (ordinal - EPOCH_ORDINAL) * 1440
        got = self._starts.get(ordinal)
        if got is None:
            got = _midnight(date.fromordinal(ordinal), self._tz_of_day(ordinal))
            if len(self._starts) >= MEMO_LIMIT:
                self._starts.clear()
            self._starts[ordinal] = got
        return got

    def end(self, ordinal: int) -> int:
        """UTC minute the local day ``ordinal`` ends at (the next day's start)."""
        return self.start(ordinal + 1)

    def at(self, minute: int) -> datetime:
        """Aware local datetime of UTC ``minute`` in the zone of the day holding it."""
        ordinal, _ = self.day_of(minute)
        return minute_dt(minute).astimezone(self._tz_of_day(ordinal))

    def day_start(self, day: date) -> datetime:
        """Aware local datetime the local ``day`` starts at (its midnight, with its offset)."""
        return self.at(self.start(day.toordinal()))

    def today(self, now: datetime | None = None) -> date:
        """The local date now."""
        m = dt_minute(now or datetime.now(UTC))
        return date.fromordinal(self.day_of(m)[0])


UTC_CALENDAR = Calendar()


def iso(t: datetime) -> str:
    """ISO-8601 with the offset; UTC (and naive, which is UTC here) as ``...Z``."""
    if t.tzinfo is None:
        return t.isoformat() + "Z"
    if t.tzinfo is UTC:
        return t.replace(tzinfo=None).isoformat() + "Z"
    return t.isoformat()
