from datetime import UTC, datetime, timedelta

from pipeline.cli_common import parse_time
from pipeline.query.series import buckets, floor, zero_filled


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
    s = zero_filled(datetime(2020, 1, 1), datetime(2020, 1, 1, 2), "hour", {datetime(2020, 1, 1, 1): 5})
    assert s == [(datetime(2020, 1, 1), 0), (datetime(2020, 1, 1, 1), 5), (datetime(2020, 1, 1, 2), 0)]


def test_parse_time_relative_and_iso() -> None:
    now = datetime(2020, 1, 1, 12, tzinfo=UTC)
    assert parse_time("now", now) == now
    assert parse_time("now-60m", now) == datetime(2020, 1, 1, 11, tzinfo=UTC)
    assert parse_time("now-2d", now) == datetime(2019, 12, 30, 12, tzinfo=UTC)
    assert parse_time("2020-01-01", now) == datetime(2020, 1, 1, tzinfo=UTC)


def test_a_short_minute_series_projects_only_its_hours() -> None:
    from pipeline.kinds.hits.layout import hits_fields
    from pipeline.kinds.hits.query import minute_paths, series_query

    f = hits_fields("compact").daily
    late = datetime(2026, 3, 29, 23, 30)
    assert minute_paths(f.minute, late - timedelta(minutes=59), late) == [f"{f.minute}.22", f"{f.minute}.23"]
    across = minute_paths(f.minute, late, late + timedelta(minutes=59))  # into the next day
    assert across == [f"{f.minute}.0", f"{f.minute}.23"]
    assert minute_paths(f.minute, late - timedelta(days=2), late) == [f.minute]
    _, _, proj = series_query("s", None, late - timedelta(minutes=5), late, "minute", hits_fields("compact"))
    assert f"{f.minute}.23" in proj and f.minute not in proj
