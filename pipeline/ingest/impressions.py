"""Decoding of impression and relation events (pure)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.aggregate.keys import Id
from pipeline.ingest.timeparse import TimeError, parse_ts
from pipeline.ingest.validate import EventDecoder, Rejection

Impression = tuple[Id, Id, float]
Relation = tuple[Id, Id]


class ImpressionDecoder:
    """One line → ``(user, item, ts)`` or a :class:`Rejection` (schema, time, future skew)."""

    def __init__(self, max_bytes: int, future_skew: float, clock: Callable[[], float] = time.time) -> None:
        self._decoder = EventDecoder("impression", max_bytes)
        self._future_skew = future_skew
        self._clock = clock

    def decode(self, raw: bytes) -> Impression | Rejection:
        """The impression, or why it is refused."""
        obj = self._decoder.decode(raw)
        if isinstance(obj, Rejection):
            return obj
        try:
            ts = parse_ts(obj["ts"])
        except TimeError as exc:
            return Rejection("bad_time", str(exc), raw)
        if ts > self._clock() + self._future_skew:
            return Rejection(
                "future", f"ts {ts:.0f} is more than {self._future_skew:.0f}s in the future", raw
            )
        return obj["user"], obj["item"], ts


class RelationDecoder:
    """One line → ``(user, item)`` or a :class:`Rejection`."""

    def __init__(self, max_bytes: int) -> None:
        self._decoder = EventDecoder("relation", max_bytes)

    def decode(self, raw: bytes) -> Relation | Rejection:
        """The relation, or why it is refused."""
        obj = self._decoder.decode(raw)
        if isinstance(obj, Rejection):
            return obj
        return obj["user"], obj["item"]
