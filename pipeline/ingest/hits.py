"""Decoding of hit events into the (site, page, epoch seconds) the aggregator counts."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.ingest.timeparse import TimeError, parse_ts
from pipeline.ingest.validate import EventDecoder, Rejection

Hit = tuple[str, str, float]


class HitDecoder:
    """One line → :data:`Hit`, or a :class:`Rejection` (schema, time, future skew)."""

    def __init__(
        self,
        max_bytes: int,
        future_skew: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._decoder = EventDecoder("hit", max_bytes)
        self._future_skew = future_skew
        self._clock = clock

    def decode(self, raw: bytes) -> Hit | Rejection:
        """The hit, or why it is refused."""
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
        return obj["site"], obj["page"], ts
