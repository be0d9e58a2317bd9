"""Source positions of one worker: which Kafka offsets are already counted in MongoDB.

The authority on "counted" is the offsets document MongoDB stores with each flush
(see docs/exactly-once.md). This module holds the worker's view of it per partition:

* ``next`` is the ingest cursor: the first offset not yet taken into any batch.
  A delivered message below it is a replay (Kafka's committed offset lags MongoDB's
  after a crash between the two commits) and is skipped, not counted.
* A batch remembers, per partition, the cursor it started from: the value MongoDB
  must still hold when the batch commits (the fence).

Pure logic: loading from and writing to MongoDB live in :mod:`pipeline.store.offsets`.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.core.commit import TP


class Positions:
    """Ingest cursors per partition; unknown partitions must be loaded before use."""

    def __init__(self) -> None:
        self._next: dict[TP, int | None] = {}
        self.skipped = 0

    def known(self, tp: TP) -> bool:
        """True when the stored position of ``tp`` was loaded (``None`` counts: nothing stored)."""
        return tp in self._next

    def load(self, stored: dict[TP, int | None]) -> None:
        """Adopt positions read from MongoDB (``None``: no flush recorded yet)."""
        self._next.update(stored)

    def get(self, tp: TP) -> int | None:
        """Current cursor of ``tp`` (``None``: nothing stored, every offset is new)."""
        return self._next[tp]

    def accept(self, tp: TP, offset: int) -> bool:
        """Take ``offset`` into the current batch, or refuse it as already counted."""
        current = self._next[tp]
        if current is not None and offset < current:
            self.skipped += 1
            return False
        self._next[tp] = offset + 1
        return True

    def forget(self, tps: Iterable[TP]) -> None:
        """Drop cursors (after a rebalance): they are reloaded from MongoDB on next use."""
        for tp in tps:
            self._next.pop(tp, None)

    def assigned(self) -> list[TP]:
        """Partitions with a loaded cursor."""
        return list(self._next)
