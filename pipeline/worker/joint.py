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


class JointAck:
    """The ack of each of ``parties`` flushers; the records go to ``ack`` once all have acked them."""

    def __init__(self, ack: Ack, parties: int = 2) -> None:
        self.ack, self.parties = ack, parties
        #: Per partition, per offset: the parties that acked that record so far. Offsets are
        #: keyed within their partition's map, not as one (topic, partition, offset) tuple each:
        #: a flush acks hundreds of thousands of records at once, and a tuple per record made
        #: the collector walk the worker's whole heap (1.5 s of a 250,000-record ack, py-spy).
        self.waiting: dict[tuple[str, int], dict[int, int]] = {}

    def party(self, index: int) -> Ack:
        """The ack to give flusher number ``index``."""
        bit = 1 << index
        full = (1 << self.parties) - 1

        async def ack(handles: Sequence[object]) -> None:
            ready = []
            waiting = self.waiting
            topic: str | None = None
            partition = -1
            offsets: dict[int, int] = {}
            for h in handles:
                if h is None:
                    continue
                r: Any = h
                if r.partition != partition or r.topic != topic:
                    topic, partition = r.topic, r.partition
                    offsets = waiting.setdefault((r.topic, r.partition), {})
                offset = r.offset
                seen = offsets.get(offset, 0) | bit
                if seen == full:
                    offsets.pop(offset, None)
                    ready.append(h)
                else:
                    offsets[offset] = seen
            if ready:
                await self.ack(ready)

        return ack

    def pending(self) -> set[tuple[str, int, int]]:
        """The records some party acked and another not yet, as (topic, partition, offset)."""
        return {(t, p, o) for (t, p), offsets in self.waiting.items() for o in offsets}

    def keep(self, held: Iterable[tuple[str, int]]) -> None:
        """Drop what is remembered of partitions not in ``held`` (revoked: their records come again)."""
        kept = set(held)
        self.waiting = {tp: offsets for tp, offsets in self.waiting.items() if tp in kept}
