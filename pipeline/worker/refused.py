"""Offset commits Kafka refused, asked for again at the next commit (pure bookkeeping).

Faust 0.15 (``Consumer._commit_offsets``) records offsets as committed even when Kafka
refused the OffsetCommit (``CommitFailedError``: "already rebalanced", an
``IllegalGeneration`` while the group re-forms). A partition that keeps its owner and
gets no later message then keeps its Kafka lag for ever: every event is counted (the
ledgers say so), but ``preagg status`` reads the ledgers while a KEDA trigger reading
Kafka's lag keeps a replica for it. :class:`RefusedCommits` remembers what was refused,
so that the worker's consumer restores Faust's committed offset and asks Kafka again at
its next commit (every ``commit_interval``), until Kafka takes it or the partition is
revoked (its next owner then starts from Kafka's committed offset, reads the records
again, skips them by the ledgers and commits them).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


class RefusedCommits(Generic[P]):
    """Per partition, the offset whose commit Kafka refused and that is still to commit."""

    def __init__(self) -> None:
        self.offsets: dict[P, int] = {}
        #: Refusals seen (each retried at the next commit): for the worker's metrics.
        self.refusals = 0

    def with_refused(self, offsets: Mapping[P, int], assigned: Collection[P]) -> dict[P, int]:
        """The offsets to commit now: ``offsets`` and the refused ones of partitions still held."""
        out = dict(offsets)
        for tp, offset in self.offsets.items():
            if tp in assigned and offset > out.get(tp, -1):
                out[tp] = offset
        return out

    def refused(self, offsets: Mapping[P, int], assigned: Collection[P]) -> list[P]:
        """Kafka refused ``offsets``: remember those of partitions still held; returns them."""
        held = [tp for tp in offsets if tp in assigned]
        for tp in held:
            self.offsets[tp] = max(offsets[tp], self.offsets.get(tp, -1))
        if held:
            self.refusals += 1
        return held

    def committed(self, offsets: Mapping[P, int]) -> list[P]:
        """Kafka took ``offsets``: forget what they cover; returns the partitions whose refusal ended."""
        done = [tp for tp, offset in offsets.items() if tp in self.offsets and offset >= self.offsets[tp]]
        for tp in done:
            del self.offsets[tp]
        return done

    def revoked(self, tps: Collection[P]) -> None:
        """The partitions left this worker: their next owner commits them."""
        for tp in tps:
            self.offsets.pop(tp, None)
