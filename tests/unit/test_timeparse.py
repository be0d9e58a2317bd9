from datetime import UTC, datetime

import pytest

from pipeline.core.times import TimeError, minute_of, parse_ts


def test_iso_with_offset_and_z_and_epoch_agree() -> None:
    t = datetime(2015, 5, 17, 10, 5, 3, tzinfo=UTC).timestamp()
    assert parse_ts("2015-05-17T10:05:03+00:00") == t
    assert parse_ts("2015-05-17T10:05:03Z") == t
    assert parse_ts("2015-05-17T12:05:03+02:00") == t
    assert parse_ts(t) == t
    assert parse_ts(int(t)) == t


@pytest.mark.parametrize(
    "value", ["2015-05-17T10:05:03", "yesterday", "", True, None, -1, 1e12 * 1000, float("nan"), [1]]
)
def test_bad_times_are_refused_with_a_reason(value: object) -> None:
    with pytest.raises(TimeError, match="ts"):
        parse_ts(value)


def test_minute_bucket_is_utc_minute_since_epoch() -> None:
    assert minute_of(0) == 0
    assert minute_of(59.999) == 0
    assert minute_of(60) == 1
    t = datetime(2016, 2, 29, 23, 59, 59, tzinfo=UTC).timestamp()
    assert minute_of(t) * 60 == datetime(2016, 2, 29, 23, 59, tzinfo=UTC).timestamp()
