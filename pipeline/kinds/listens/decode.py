"""Decoding of listen events (pure)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.core.decode import TimedDecoder
from pipeline.core.fields import event_schema
from pipeline.core.ids import Id
from pipeline.core.rejection import Rejection
from pipeline.kinds.listens.layout import FOLDER

Listen = tuple[Id, Id, Id, float]


class ListenDecoder(TimedDecoder):
    """One line → ``(user, tag, song, ts)`` or a :class:`Rejection`."""

    def __init__(
        self, max_bytes: int, future_skew: float, clock: Callable[[], float] = time.time, fmt: str = "event"
    ) -> None:
        super().__init__(
            "listen", event_schema(FOLDER), ("user", "tag", "song"), max_bytes, future_skew, clock, fmt
        )

    def decode(self, raw: bytes) -> Listen | Rejection:
        """The listen, or why it is refused."""
        result: Listen | Rejection = super().decode(raw)
        return result
