"""Time buckets and zero-filled series (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeVar

Granularity = Literal["minute", "hour", "day", "month"]
GRANULARITIES: tuple[Granularity, ...] = ("minute", "hour", "day", "month")
K = TypeVar("K")


def floor(dt: datetime, by: Granularity) -> datetime:
    """Start of the bucket holding ``dt`` (naive UTC)."""
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    if by == "minute":
        return dt.replace(second=0, microsecond=0)
    if by == "hour":
        return dt.replace(minute=0, second=0, microsecond=0)
    if by == "day":
        return dt.replace(hour=0, minute=0, second=0, microsecond=0)
    return dt.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_bucket(dt: datetime, by: Granularity) -> datetime:
    """Start of the bucket after the one starting at ``dt``."""
    if by == "minute":
        return dt + timedelta(minutes=1)
    if by == "hour":
        return dt + timedelta(hours=1)
    if by == "day":
        return dt + timedelta(days=1)
    return (dt.replace(day=28) + timedelta(days=4)).replace(day=1)


def buckets(start: datetime, end: datetime, by: Granularity) -> Iterator[datetime]:
    """Bucket starts from the one holding ``start`` to the one holding ``end``, inclusive."""
    b, last = floor(start, by), floor(end, by)
    while b <= last:
        yield b
        b = next_bucket(b, by)


def add_into(acc: dict[K, int], items: Iterable[tuple[K, int]]) -> None:
    """Sum counts into ``acc`` by bucket key (several pages of one site add up)."""
    for b, n in items:
        acc[b] = acc.get(b, 0) + n
