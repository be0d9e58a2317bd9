from datetime import UTC, datetime

from pipeline.core.parse import parse_time
from pipeline.core.series import buckets, floor


def test_buckets_cover_range_inclusive() -> None:
    b = list(buckets(datetime(2020, 1, 1, 0, 0, 30), datetime(2020, 1, 1, 0, 3), "minute"))
    assert b == [datetime(2020, 1, 1, 0, i) for i in range(4)]
    months = list(buckets(datetime(2020, 11, 15), datetime(2021, 2, 1), "month"))
    assert months == [
        datetime(2020, 11, 1),
        datetime(2020, 12, 1),
        datetime(2021, 1, 1),
        datetime(2021, 2, 1),
    ]
    days = list(buckets(datetime(2020, 2, 28, 5), datetime(2020, 3, 1), "day"))
    assert len(days) == 3


def test_aware_times_are_converted_to_utc() -> None:
    t = datetime.fromisoformat("2020-01-01T01:30:00+02:00")
    assert floor(t, "hour") == datetime(2019, 12, 31, 23)


def test_zero_fill() -> None:
    counts = {datetime(2020, 1, 1, 1): 5}
    s = [(b, counts.get(b, 0)) for b in buckets(datetime(2020, 1, 1), datetime(2020, 1, 1, 2), "hour")]
    assert s == [(datetime(2020, 1, 1), 0), (datetime(2020, 1, 1, 1), 5), (datetime(2020, 1, 1, 2), 0)]


def test_parse_time_relative_and_iso() -> None:
    now = datetime(2020, 1, 1, 12, tzinfo=UTC)
    assert parse_time("now", now) == now
    assert parse_time("now-60m", now) == datetime(2020, 1, 1, 11, tzinfo=UTC)
    assert parse_time("now-2d", now) == datetime(2019, 12, 30, 12, tzinfo=UTC)
    assert parse_time("2020-01-01", now) == datetime(2020, 1, 1, tzinfo=UTC)
