"""A date as the end of a range names its whole local day, at every granularity."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.core.calendar import Calendar, ZoneChange
from pipeline.core.params import BadParam, Param
from pipeline.core.parse import parse_end, parse_time
from pipeline.kinds.hits.query import _buckets, local_days

NOW = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)
UTC_SITE = Calendar()
BERLIN = Calendar([ZoneChange(None, "Europe/Berlin")])


def buckets(start: str, end: str, by: str, cal: Calendar) -> list[int]:
    lo, hi, d0, d1 = local_days(parse_time(start, local=True), parse_end(end, local=True), cal)
    return _buckets(by, lo, hi, d0, d1, cal)  # type: ignore[arg-type]


def test_a_date_as_end_is_its_whole_day_a_time_stays_an_instant() -> None:
    assert parse_end("2015-05-20", local=True) == datetime(2015, 5, 20, 23, 59, 59, 999_999)
    assert parse_end("2015-05-20T12:00", local=True) == datetime(2015, 5, 20, 12, 0)
    assert parse_end("now", NOW) == NOW
    assert parse_end("2015-05-20") == datetime(2015, 5, 20, 23, 59, 59, 999_999, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cal", "day", "hours"),
    [
        (UTC_SITE, "2015-05-20", 24),
        (BERLIN, "2026-03-29", 23),  # clocks go forward: a 23-hour day
        (BERLIN, "2026-10-25", 25),  # clocks go back: a 25-hour day
    ],
)
def test_from_and_to_the_same_date_cover_its_hours_and_minutes(cal: Calendar, day: str, hours: int) -> None:
    assert len(buckets(day, day, "hour", cal)) == hours
    assert len(buckets(day, day, "minute", cal)) == hours * 60
    assert len(buckets(day, day, "day", cal)) == 1


def test_the_readme_range_ends_with_the_last_days_hours() -> None:
    """`--from 2015-05-17 --to 2015-05-20 --by hour` ended at 2015-05-20 00:00 (the 20th left out)."""
    hours = buckets("2015-05-17", "2015-05-20", "hour", UTC_SITE)
    assert len(hours) == 4 * 24
    assert hours[-1] == int(datetime(2015, 5, 20, 23, tzinfo=UTC).timestamp() // 60)


def test_the_api_parameter_takes_a_date_as_a_whole_day() -> None:
    to = Param("to", "", "end", default="now")
    assert to.parse("2015-05-20", NOW) == datetime(2015, 5, 20, 23, 59, 59, 999_999)
    assert to.parse("2015-05-20T06:30", NOW) == datetime(2015, 5, 20, 6, 30)
    assert to.parse(None, NOW) == NOW
    assert to.parse("1432080000000", NOW) == datetime(2015, 5, 20, tzinfo=UTC)  # epoch ms: an instant
    with pytest.raises(BadParam, match="its whole day"):
        to.parse("2015-13-45", NOW)
