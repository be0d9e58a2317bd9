"""Local calendars against a brute force with zoneinfo, around DST changes (seeded random, property style)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pipeline.core.calendar import Calendar, ZoneChange, ZoneError, dt_minute, iso, minute_dt

#: Whole-hour DST (Berlin, New York), half-hour offset (Kolkata), 45-minute offset (Kathmandu),
#: 30-minute DST (Lord Howe), DST at midnight (Santiago, Asuncion), +12:45/+13:45 (Chatham).
ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Asuncion",
    "Pacific/Chatham",
    "UTC",
]


def transitions(zone: str, year: int) -> list[int]:
    """UTC minutes where the zone's offset changes in ``year`` (brute force, hour steps then minutes)."""
    tz = ZoneInfo(zone)
    out = []
    m = dt_minute(datetime(year, 1, 1, tzinfo=UTC))
    end = dt_minute(datetime(year + 1, 1, 1, tzinfo=UTC))
    off = minute_dt(m).astimezone(tz).utcoffset()
    while m < end:
        nxt = minute_dt(m + 60).astimezone(tz).utcoffset()
        if nxt != off:
            k = m
            while minute_dt(k).astimezone(tz).utcoffset() == off:
                k += 1
            out.append(k)
            off = nxt
        m += 60
    return out


def brute_day_start(day: date, zone: str) -> int:
    """First UTC minute whose local date is ``day``: a scan, minute by minute, near local midnight."""
    tz = ZoneInfo(zone)
    m = dt_minute(datetime(day.year, day.month, day.day, tzinfo=UTC)) - 15 * 60
    while minute_dt(m + 60).astimezone(tz).date() < day:
        m += 60
    while minute_dt(m).astimezone(tz).date() < day:
        m += 1
    return m


def events_around(zone: str, rng: random.Random, n: int) -> list[int]:
    """Random minutes within 30 hours of the zone's changes in 2024-2026 (and anywhere in those years)."""
    near = [t for y in (2024, 2025, 2026) for t in transitions(zone, y)]
    lo = dt_minute(datetime(2024, 1, 1, tzinfo=UTC))
    out = []
    for _ in range(n):
        if near and rng.random() < 0.8:
            out.append(rng.choice(near) + rng.randint(-30 * 60, 30 * 60))
        else:
            out.append(lo + rng.randint(0, 3 * 365 * 1440))
    return out


@pytest.mark.parametrize("zone", ZONES)
def test_local_days_hours_and_months_equal_a_brute_force(zone: str) -> None:
    rng = random.Random(zone)
    cal = Calendar([ZoneChange(None, zone)])
    tz = ZoneInfo(zone)
    minutes = events_around(zone, rng, 4000)
    days: Counter[date] = Counter()
    months: Counter[tuple[int, int]] = Counter()
    hours: Counter[tuple[date, int]] = Counter()
    want_days: Counter[date] = Counter()
    want_months: Counter[tuple[int, int]] = Counter()
    want_hours: Counter[tuple[date, int]] = Counter()
    starts: dict[date, int] = {}
    for m in minutes:
        ordinal, start = cal.day_of(m)
        d = date.fromordinal(ordinal)
        days[d] += 1
        months[d.year, d.month] += 1
        hours[d, (m - start) // 60] += 1
        local = minute_dt(m).astimezone(tz)
        want = local.date()
        want_days[want] += 1
        want_months[want.year, want.month] += 1
        if want not in starts:
            starts[want] = brute_day_start(want, zone)
        want_hours[want, (m - starts[want]) // 60] += 1
        # The label of a minute is its local time with the offset in force.
        assert cal.at(m) == local and cal.at(m).utcoffset() == local.utcoffset()
    assert days == want_days
    assert months == want_months
    assert hours == want_hours
    for d, s in starts.items():
        assert cal.start(d.toordinal()) == s
        assert cal.end(d.toordinal()) == brute_day_start(d + timedelta(days=1), zone)


def test_dst_days_last_23_and_25_hours() -> None:
    berlin = Calendar([ZoneChange(None, "Europe/Berlin")])
    spring, autumn = date(2026, 3, 29).toordinal(), date(2026, 10, 25).toordinal()
    assert berlin.end(spring) - berlin.start(spring) == 23 * 60
    assert berlin.end(autumn) - berlin.start(autumn) == 25 * 60
    lord_howe = Calendar([ZoneChange(None, "Australia/Lord_Howe")])
    spring, autumn = date(2026, 10, 4).toordinal(), date(2026, 4, 5).toordinal()
    assert lord_howe.end(spring) - lord_howe.start(spring) == 23 * 60 + 30
    assert lord_howe.end(autumn) - lord_howe.start(autumn) == 24 * 60 + 30
    assert iso(berlin.day_start(date(2026, 10, 25))) == "2026-10-25T00:00:00+02:00"
    assert iso(berlin.day_start(date(2026, 10, 26))) == "2026-10-26T00:00:00+01:00"
    assert iso(Calendar().day_start(date(2026, 1, 1))) == "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("old", "new"),
    [("UTC", "Europe/Berlin"), ("Europe/Berlin", "America/New_York"), ("America/New_York", "Asia/Kolkata")],
)
def test_a_zone_change_tiles_time_and_leaves_earlier_days(old: str, new: str) -> None:
    since = date(2026, 3, 29)  # Berlin's spring change, on purpose
    before = Calendar([ZoneChange(None, old)])
    cal = Calendar([ZoneChange(None, old), ZoneChange(since, new)])
    lo = dt_minute(datetime(2026, 3, 20, tzinfo=UTC))
    hi = dt_minute(datetime(2026, 4, 5, tzinfo=UTC))
    prev = None
    for m in range(lo, hi, 7):
        ordinal, start = cal.day_of(m)
        assert start <= m < cal.end(ordinal)
        if prev is not None:
            assert ordinal in (prev, prev + 1)  # days follow each other, none skipped or repeated
        prev = ordinal
        if ordinal < since.toordinal() - 1:
            assert (ordinal, start) == before.day_of(m)  # earlier days are untouched
        if ordinal >= since.toordinal():
            assert cal.zone_of_day(ordinal) == new
            assert minute_dt(m).astimezone(ZoneInfo(new)).date() == date.fromordinal(ordinal)
    assert cal.start(since.toordinal()) == brute_day_start(since, new)


def test_bad_zones_are_refused() -> None:
    with pytest.raises(ZoneError, match="not an IANA"):
        Calendar([ZoneChange(None, "Mars/Olympus")])
    with pytest.raises(ZoneError, match="increasing"):
        Calendar(
            [
                ZoneChange(None, "UTC"),
                ZoneChange(date(2026, 2, 1), "Asia/Tokyo"),
                ZoneChange(date(2026, 1, 1), "Europe/Berlin"),
            ]
        )
    with pytest.raises(ZoneError, match="empty"):
        Calendar([ZoneChange(None, "Etc/GMT+12"), ZoneChange(date(2026, 2, 1), "Pacific/Kiritimati")])
