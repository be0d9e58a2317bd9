"""The clock a batch's decisions read: the wall clock, or the time the batch recorded (pure).

Lateness and future skew compare an event's time with "now". A flush cut short is written
again later, perhaps by another worker, from the records of its range: read at that later
"now", the same event may be refused where the flush had counted it (and a dead-letter
replay would then count it twice), or counted where the flush had refused it. So a batch
takes its "now" once, when it opens; every decision of the batch reads that instant
(:class:`DecisionClock` pinned around its ingestion); the flush's intent records it, and a
redo pins the same instant (docs/exactly-once.md, "A redo decides as the flush did").
"""

from __future__ import annotations

import time
from collections.abc import Callable


class DecisionClock:
    """A callable clock: the pinned instant while one is pinned, else the wall clock."""

    __slots__ = ("at", "wall")

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        #: The pinned instant (epoch seconds), or ``None``.
        self.at: float | None = None

    def __call__(self) -> float:
        return self.wall() if self.at is None else self.at
