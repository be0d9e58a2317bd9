"""The flush loop shared by every stream kind: write, then ack.

Order of a flush (the commit order of quix-streams): swap out the pending batch,
send its dead letters and wait for the broker's acknowledgement, write its planned
upserts and wait for MongoDB's, and only then ack its Kafka messages, so that
Faust commits their offsets. A failed write is retried with backoff, forever, while
the batch stays unacked: nothing is lost, and the agent, which waits for the flush
once its pending keys pass the bound, stops consuming (backpressure).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic

from pipeline.aggregate.updates import DocUpdate, split_wide
from pipeline.ingest.envelope import unpack
from pipeline.worker.batch import TP, A, PendingBatch, new_batch
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.opsdocs import ops_updates

log = logging.getLogger("preagg.flush")

Write = Callable[[Sequence[DocUpdate]], Awaitable[int]]
SendDead = Callable[[Sequence[DeadLetter]], Awaitable[None]]
Ack = Callable[[object], Awaitable[object]]


@dataclass
class FlushStats:
    """Running totals of one flusher, for logs and metrics."""

    events: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    flushes: int = 0
    docs: int = 0
    last_flush_seconds: float = 0.0
    last_flush_at: float = 0.0
    retries: int = 0


class Flusher(Generic[A]):
    """Holds the pending batch of one stream kind and flushes it."""

    def __init__(
        self,
        stream: str,
        factory: Callable[[], A],
        write: Write,
        send_dead: SendDead,
        ack: Ack,
        worker: str,
        max_pending_keys: int,
        max_fields_per_update: int = 0,
        max_backoff: float = 30.0,
    ) -> None:
        self.stream = stream
        self._factory = factory
        self._write = write
        self._send_dead = send_dead
        self._ack = ack
        self.worker = worker
        self.max_pending_keys = max_pending_keys
        self.max_fields_per_update = max_fields_per_update
        self.max_backoff = max_backoff
        self.batch: PendingBatch[A] = new_batch(factory)
        self.stats = FlushStats()
        self._lock = asyncio.Lock()

    def ingest(self, tp: TP, offset: int, value: bytes | None, ack: object) -> None:
        """Aggregate one Kafka message (single or packed events)."""
        lines = list(unpack(value)) if value else []
        self.batch.ingest_message(tp, offset, lines, ack)

    def should_flush(self) -> bool:
        """True when pending keys reached the memory bound."""
        return self.batch.pending_keys() >= self.max_pending_keys

    async def flush(self) -> None:
        """Write the pending batch, then ack its messages. Serialised by a lock."""
        async with self._lock:
            batch, self.batch = self.batch, new_batch(self._factory)
            if batch.empty():
                return
            started = time.monotonic()
            rejected = batch.rejected_by_reason()
            plan = batch.aggregate.plan()
            docs = len(plan)
            plan.extend(ops_updates(self.worker, self.stream, batch.events, rejected, docs))
            plan = split_wide(plan, self.max_fields_per_update)
            if batch.dead:
                await self._retry("dead-letter send", lambda: self._send_dead(batch.dead), batch)
                for d in batch.dead[:5]:
                    log.warning(
                        "rejected %s event at %s[%d]@%d line %d: %s",
                        self.stream,
                        d.topic,
                        d.partition,
                        d.offset,
                        d.line,
                        d.rejection.detail,
                    )
            await self._retry("MongoDB write", lambda: self._write(plan), batch)
            for a in batch.acks:
                await self._ack(a)
            self._account(batch, rejected, docs, time.monotonic() - started)

    def _account(self, batch: PendingBatch[A], rejected: dict[str, int], docs: int, took: float) -> None:
        s = self.stats
        s.events += batch.events
        for reason, n in rejected.items():
            s.rejected[reason] = s.rejected.get(reason, 0) + n
        s.flushes += 1
        s.docs += docs
        s.last_flush_seconds = took
        s.last_flush_at = time.time()
        log.info(
            "flushed %s: %d events, %d rejected, %d docs in %.3fs (offsets %s)",
            self.stream,
            batch.events,
            sum(rejected.values()),
            docs,
            took,
            {f"{t}[{p}]": r for (t, p), r in batch.offsets.items()},
        )

    async def _retry(self, what: str, op: Callable[[], Awaitable[object]], batch: PendingBatch[A]) -> None:
        delay = 0.5
        while True:
            try:
                await op()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any store/broker failure: keep the batch, back off
                self.stats.retries += 1
                log.warning(
                    "%s failed (%s: %s); %d events held unacked, retrying in %.1fs",
                    what,
                    type(exc).__name__,
                    str(exc)[:200],
                    batch.events,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
