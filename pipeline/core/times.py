"""Event time parsing and bucketing, all in UTC epoch seconds.

Events carry ISO-8601 times with an offset or epoch seconds. Times without an
offset are rejected rather than guessed: a wrong guess moves counts silently.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from typing import Any

from pipeline.core.errors import InputError
from pipeline.core.rejection import Rejection

MIN_EPOCH = 0.0
#: Year 3000: anything later is a unit error (ms or us sent as seconds).
MAX_EPOCH = 32_503_680_000.0


class TimeError(InputError):
    """The event time cannot be understood; the message is the dead-letter reason."""


def parse_ts(value: object) -> float:
    """Epoch seconds (UTC) of an event's ``ts`` field."""
    cls = value.__class__
    if cls is float or cls is int:  # the common case first: one check per event (profiled)
        ts = float(value)  # type: ignore[arg-type]
        if MIN_EPOCH <= ts < MAX_EPOCH:  # also false for NaN
            return ts
        raise TimeError(f"ts: epoch seconds out of range: {value!r}")
    if isinstance(value, bool):
        raise TimeError("ts: boolean is not a time")
    if isinstance(value, int | float):
        ts = float(value)
        if not math.isfinite(ts) or ts < MIN_EPOCH or ts >= MAX_EPOCH:
            raise TimeError(f"ts: epoch seconds out of range: {value!r}")
        return ts
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise TimeError(f"ts: not an ISO-8601 time: {value[:64]!r}") from None
        if dt.tzinfo is None or dt.utcoffset() is None:
            raise TimeError(f"ts: ISO-8601 time without UTC offset: {value[:64]!r}")
        ts = dt.timestamp()
        if ts < MIN_EPOCH or ts >= MAX_EPOCH:
            raise TimeError(f"ts: time out of range: {value[:64]!r}")
        return ts
    raise TimeError(f"ts: expected ISO-8601 string or epoch seconds, got {type(value).__name__}")


def minute_of(ts: float) -> int:
    """Index of the UTC minute holding ``ts`` (minutes since the epoch)."""
    return int(ts // 60)


def utc(ts: float) -> datetime:
    """Aware UTC datetime of epoch seconds."""
    return datetime.fromtimestamp(ts, tz=UTC)


def day_key(ts: float) -> str:
    """UTC day of an epoch time as ``YYYYMMDD`` (the day part of impression and listen documents)."""
    return day_text(utc(ts).date())


def day_text(day: date) -> str:
    """A day as ``YYYYMMDD``."""
    return f"{day:%Y%m%d}"


def event_time(
    value: Any, raw: bytes, now: float, future_skew: float, lateness: float = 0.0
) -> float | Rejection:
    """An event's ``ts`` field as epoch seconds, or why it is refused (bad_time, future, late).

    ``lateness``: events older than this many seconds are ``late`` (0: no horizon).
    """
    try:
        ts = parse_ts(value)
    except TimeError as exc:
        return Rejection("bad_time", str(exc), raw)
    if ts > now + future_skew:
        return Rejection("future", f"ts {ts:.0f} is more than {future_skew:.0f}s in the future", raw)
    if lateness and ts < now - lateness:
        return Rejection(
            "late",
            f"ts {utc(ts):%Y-%m-%dT%H:%M:%SZ} is {(now - ts) / 3600:.1f} h old, past the stream's lateness "
            f"horizon ({lateness / 3600:g} h); `preagg deadletters replay --reason late` counts it",
            raw,
        )
    return ts


def midnight(day: date) -> datetime:
    """A local day as the naive ``datetime`` its documents store (``m.d``: the day at 00:00)."""
    return datetime(day.year, day.month, day.day)
