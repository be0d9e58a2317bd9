"""Decoding of timed events (hits, impressions) into tuples the aggregators count."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from pipeline.ingest.timeparse import event_time
from pipeline.ingest.validate import EventDecoder, Rejection

Hit = tuple[str, str, float]


class TimedDecoder:
    """One line → ``(*fields, ts)`` or a :class:`Rejection` (size, JSON, schema, time, future skew)."""

    kind: ClassVar[str]
    fields: ClassVar[tuple[str, ...]]

    def __init__(self, max_bytes: int, future_skew: float, clock: Callable[[], float] = time.time) -> None:
        self._decoder = EventDecoder(self.kind, max_bytes)
        self._future_skew = future_skew
        self._clock = clock

    def decode(self, raw: bytes) -> Any:
        """The event's fields and time, or why it is refused."""
        obj = self._decoder.decode(raw)
        if isinstance(obj, Rejection):
            return obj
        ts = event_time(obj["ts"], raw, self._clock(), self._future_skew)
        if isinstance(ts, Rejection):
            return ts
        return (*(obj[f] for f in self.fields), ts)


class HitDecoder(TimedDecoder):
    """One line → :data:`Hit` ``(site, page, ts)``, or a :class:`Rejection`."""

    kind = "hit"
    fields = ("site", "page")

    def decode(self, raw: bytes) -> Hit | Rejection:
        """The hit, or why it is refused."""
        result: Hit | Rejection = super().decode(raw)
        return result
