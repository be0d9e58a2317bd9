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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from pipeline.core.commit import TP, Forward
from pipeline.core.visit_hits import VisitHit, pack

#: Sends one message to a partition of the topic; returns the acknowledgement to wait for.
Send = Callable[[bytes, int], Awaitable[Awaitable[object]]]

#: The batch's aggregates by source partition → the flush's :data:`~pipeline.core.commit.Forward`
#: (``None``: nothing to forward).
ForwardOf = Callable[[Mapping[int, Any]], Forward | None]


class Forwarder:
    """Packs and sends what a stream's flushes forward to ``topic``."""

    def __init__(
        self,
        topic: str,
        forwarded: Callable[[Any], list[VisitHit]],
        send: Send,
        partitions: Callable[[], Awaitable[list[int]]],
        timeout: float,
    ) -> None:
        self.topic, self.forwarded, self.send = topic, forwarded, send
        self.partitions, self.timeout = partitions, timeout
        self._count = 0
        #: Messages and hits sent (a flush sent again counts again).
        self.messages = 0
        self.hits = 0

    def of(self, aggregates: Mapping[int, Any]) -> Forward | None:
        """The forward of a batch (its aggregates by source partition), or ``None`` when none has hits."""
        hits = {p: got for p, a in aggregates.items() if (got := self.forwarded(a))}
        if not hits:
            return None

        async def forward(seqs: Mapping[TP, int]) -> None:
            await self.sent(hits, seqs)

        return forward

    async def sent(self, hits: Mapping[int, list[VisitHit]], seqs: Mapping[TP, int]) -> None:
        """Every message of the flush sent and acknowledged, within the commit deadline."""
        count = await self._partitions()
        async with asyncio.timeout(self.timeout):
            acks = []
            for (name, p), seq in seqs.items():
                got = hits.get(p)
                if not got:
                    continue
                for dest, messages in pack(name, p, seq, got, lambda _site, visitor: visitor % count).items():
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
