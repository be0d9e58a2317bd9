"""A flush's records forwarded to another stage's topic, once its intent is recorded.

The kind says what an aggregate forwards (``Stream.forwarded``: hits' identified hits); this
packs them per destination partition under the flush's names (source partition, sequence,
index: pipeline/core/visit_hits.py) and sends them, waiting for every acknowledgement before
the flush writes a document. The sends run inside the commit's retried step: a flush run
again (a retry, a redo, a zombie's late one) sends the same bytes under the same names,
which the receiving stage takes once (pipeline/core/forwarded.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from pipeline.core.commit import TP, Forward
from pipeline.core.visit_hits import VisitHit, pack

#: Sends one message to a partition of the topic; returns the acknowledgement to wait for.
Send = Callable[[bytes, int], Awaitable[Awaitable[object]]]

#: The batch's aggregates by source partition → the flush's :data:`~pipeline.core.commit.Forward`
#: (``None``: nothing to forward).
ForwardOf = Callable[[Mapping[int, Any], Mapping[int, int]], Forward | None]


class Forwarder:
    """Packs and sends what a stream's flushes forward to ``topic``."""

    def __init__(
        self,
        topic: str,
        forwarded: Callable[[Any], list[VisitHit]],
        send: Send,
        partitions: Callable[[], Awaitable[list[int]]],
        timeout: float,
        group: str = "",
        at_end: Callable[[int, int], bool] = lambda _partition, _end: False,
        read_partitions: Callable[[], Awaitable[list[int]]] | None = None,
    ) -> None:
        self.topic, self.forwarded, self.send = topic, forwarded, send
        #: Messages name their source ``<group>/<ledger>``: a stage takes its own group's only.
        self.group = group
        #: Whether a flush that read a source partition up to an offset read all there was then:
        #: the stage then leaves that source out of its watermark until it sends again.
        self.at_end = at_end
        #: The partitions of the topic the flushes read: the stage waits to hear from each.
        self.read_partitions = read_partitions
        #: The partitions of the read topic this worker holds with nothing unread or unflushed
        #: (set by the wiring once the flusher exists): the stage need not wait for them.
        self.idle: Callable[[], set[int]] = set
        self.partitions, self.timeout = partitions, timeout
        self._count = 0
        self._sources = 0
        #: Messages and hits sent (a flush sent again counts again).
        self.messages = 0
        self.hits = 0

    def of(self, aggregates: Mapping[int, Any], ends: Mapping[int, int]) -> Forward | None:
        """The forward of a batch (its aggregates by source partition, and where each ends), or
        ``None`` when none has hits."""
        hits = {p: got for p, a in aggregates.items() if (got := self.forwarded(a))}
        if not hits:
            return None
        at_end = {p for p in hits if self.at_end(p, ends[p])}
        idle = sorted(self.idle() - set(aggregates))

        async def forward(seqs: Mapping[TP, int]) -> None:
            await self.sent(hits, seqs, at_end, idle)

        return forward

    async def sent(
        self,
        hits: Mapping[int, list[VisitHit]],
        seqs: Mapping[TP, int],
        at_end: Set[int] = frozenset(),
        idle: Sequence[int] = (),
    ) -> None:
        """Every message of the flush sent and acknowledged, within the commit deadline."""
        count = await self._partitions()
        if not self._sources and self.read_partitions is not None:
            self._sources = len(await self.read_partitions())
        async with asyncio.timeout(self.timeout):
            acks = []
            for (name, p), seq in seqs.items():
                got = hits.get(p)
                if not got:
                    continue
                source = f"{self.group}/{name}"
                packed = pack(
                    source,
                    p,
                    seq,
                    got,
                    lambda _site, visitor: visitor % count,
                    destinations=range(count),
                    at_end=p in at_end,
                    sources=self._sources,
                    idle=idle,
                )
                for dest, messages in packed.items():
                    for m in messages:
                        acks.append(await self.send(m, dest))
                self.hits += len(got)
            for ack in acks:
                await ack
            self.messages += len(acks)

    async def _partitions(self) -> int:
        """Partitions of the topic, read once: a visitor's destination is its hash modulo them."""
        if not self._count:
            parts = await self.partitions()
            if not parts:
                raise RuntimeError(f"topic {self.topic} has no partitions (not created?)")
            self._count = len(parts)
        return self._count


def forwarded_metrics(forwarders: list[Forwarder]) -> list[Metric]:
    """``preagg_forwarded_messages_total`` and ``preagg_forwarded_records_total``, per topic: what
    flushes sent to another stage (a flush sent again counts again)."""
    messages = CounterMetricFamily(
        "preagg_forwarded_messages", "Messages flushes sent to another stage's topic", labels=["topic"]
    )
    records = CounterMetricFamily(
        "preagg_forwarded_records", "Records (hits) in the messages flushes forwarded", labels=["topic"]
    )
    for f in forwarders:
        messages.add_metric([f.topic], float(f.messages))
        records.add_metric([f.topic], float(f.hits))
    return [messages, records]
