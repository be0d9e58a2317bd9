"""Records read by two flushers, acked once both have committed them (pure).

A kind whose documents are flushed in two families (pipeline/core/families.py) hands every
record of its topic to two flushers, each with its own ledger. Kafka's committed offset must
stay below what either has not committed: a record is acked to Faust only once both have
acked it. Each flusher acks only what its ledger holds, and a ledger never moves back, so
an ack remembered from before a rebalance stays true; at each assignment, :meth:`JointAck.keep` drops those
of partitions no longer held (memory), never making an ack happen early.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

Ack = Callable[[Sequence[object]], Awaitable[None]]


def _key(handle: Any) -> tuple[str, int, int]:
    return (handle.topic, handle.partition, handle.offset)


class JointAck:
    """The ack of each of ``parties`` flushers; the records go to ``ack`` once all have acked them."""

    def __init__(self, ack: Ack, parties: int = 2) -> None:
        self.ack, self.parties = ack, parties
        #: Per record (topic, partition, offset): the parties that acked it so far.
        self.waiting: dict[tuple[str, int, int], int] = {}

    def party(self, index: int) -> Ack:
        """The ack to give flusher number ``index``."""
        bit = 1 << index
        full = (1 << self.parties) - 1

        async def ack(handles: Sequence[object]) -> None:
            ready = []
            waiting = self.waiting
            for h in handles:
                if h is None:
                    continue
                key = _key(h)
                seen = waiting.get(key, 0) | bit
                if seen == full:
                    waiting.pop(key, None)
                    ready.append(h)
                else:
                    waiting[key] = seen
            if ready:
                await self.ack(ready)

        return ack

    def keep(self, held: Iterable[tuple[str, int]]) -> None:
        """Drop what is remembered of partitions not in ``held`` (revoked: their records come again)."""
        kept = set(held)
        self.waiting = {k: v for k, v in self.waiting.items() if (k[0], k[1]) in kept}
