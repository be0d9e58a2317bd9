"""Decoding of impression events (pure)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.core.decode import TimedDecoder
from pipeline.core.fields import event_schema
from pipeline.core.ids import Id
from pipeline.core.rejection import Rejection
from pipeline.kinds.impressions.layout import FOLDER

Impression = tuple[Id, Id, float]


class ImpressionDecoder(TimedDecoder):
    """One line → ``(user, item, ts)`` or a :class:`Rejection` (schema, time, future skew)."""

    def __init__(
        self, max_bytes: int, future_skew: float, clock: Callable[[], float] = time.time, fmt: str = "event"
    ) -> None:
        super().__init__(
            "impression", event_schema(FOLDER), ("user", "item"), max_bytes, future_skew, clock, fmt
        )

    def decode(self, raw: bytes) -> Impression | Rejection:
        """The impression, or why it is refused."""
        result: Impression | Rejection = super().decode(raw)
        return result
