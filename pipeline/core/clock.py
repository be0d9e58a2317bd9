"""The clock a record's decisions read: its Kafka time, else the time its batch recorded (pure).

Lateness and future skew compare an event's time with "now". A flush cut short is written
again later, perhaps by another worker, from the records of its range: read at that later
"now", the same event may be refused where the flush had counted it (and a dead-letter
replay would then count it twice), or counted where the flush had refused it. And the site
rollups' flushes run ahead of the pages' (docs/design.md, "Site rollups ahead of pages"):
two batches over the same record must decide alike. So "now" is the record's own time, the
timestamp Kafka stores with it (the producer's send time, or the broker's append time with
``message.timestamp.type=LogAppendTime``; brokers refuse one more than
``message.timestamp.after.max.ms``, an hour by default since Kafka 4.0, ahead of their
clock). A record without one reads its batch's instant, taken once when the batch opens;
the flush's intent records it, and a redo pins the same instant (docs/exactly-once.md, "A
redo decides as the flush did").
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
