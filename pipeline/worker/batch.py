"""What one flush carries: the aggregate, the refused events, and the source positions.

Per source partition a batch keeps the offsets it covers (``[first, last]``) and
the stored position it started from (``start``): together they are the fence its
commit checks and moves (see :mod:`pipeline.store.offsets`).

A batch also keeps the messages it took (their events as bytes, their ack
handles) until it commits, so that a batch too large or too slow to commit can be
split into two contiguous halves (:meth:`PendingBatch.split`): per partition the
first half ends where the second starts, so both fences stay exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pipeline.core.aggregator import Aggregator
from pipeline.core.clock import DecisionClock
from pipeline.core.commit import TP, Fence
from pipeline.core.decode import raised
from pipeline.core.envelope import unpack
from pipeline.core.incarnation import Fingerprint, digest
from pipeline.core.rejection import Rejection
from pipeline.worker.deadletter import DeadLetter

A = TypeVar("A", bound=Aggregator)


@dataclass(slots=True)
class Received:
    """One Kafka message of a batch: enough to ingest it again into a smaller batch."""

    tp: TP
    offset: int
    lines: list[bytes]
    ack: object
    start: int | None
    skipped: bool = False
    #: The record's timestamp, milliseconds (for the ledger's fingerprint of its last record).
    ts: int = 0


@dataclass
class PendingBatch(Generic[A]):
    """Everything ingested since the previous batch was sealed.

    With idempotent writes each source partition has an aggregate of its own
    (:attr:`by_tp`): every planned document then knows the partitions it carries, whose
    marks it checks and sets (:mod:`pipeline.core.marks`), and a partition's range can be
    written again alone by its next owner.
    """

    aggregate: A
    dead: list[DeadLetter] = field(default_factory=list)
    offsets: dict[TP, tuple[int, int]] = field(default_factory=dict)
    start: dict[TP, int | None] = field(default_factory=dict)
    acks: list[object] = field(default_factory=list)
    events: int = 0
    events_by_tp: dict[TP, int] = field(default_factory=dict)
    skipped: int = 0
    messages: list[Received] = field(default_factory=list)
    #: The dead letters were already sent (by the batch this one was split from).
    dead_sent: bool = False
    #: Per partition, the last message's timestamp and lines (its fingerprint is made once, at commit).
    last: dict[TP, tuple[int, list[bytes]]] = field(default_factory=dict)
    #: When the first message was taken (monotonic seconds; 0: empty).
    opened: float = 0.0
    #: One aggregate per source partition (idempotent writes), made by :attr:`factory`.
    by_tp: dict[TP, A] | None = None
    factory: Callable[[], A] | None = None
    #: The decoders' clock, pinned to each record's Kafka time while this batch ingests it.
    clock: DecisionClock | None = None
    #: The batch's "now" (epoch seconds, taken at its first message): the lateness and
    #: future-skew decisions of records without a Kafka time read it, and its intent records
    #: it for a redo.
    decided_at: float = 0.0
    #: Per partition, what its aggregate's plan decided from the worker's own state
    #: (``Aggregator.decisions``, hits: page-cap refusals): recorded with the intent.
    decisions: dict[TP, bytes] = field(default_factory=dict)
    #: A redo's: the decisions its flush recorded, which the plan assumes (``Aggregator.assume``).
    assumed: dict[TP, bytes | None] = field(default_factory=dict)
    #: With :attr:`by_tp`: the sums of the aggregates' keys and documents, kept as each message is
    #: ingested (an aggregate changes only then). The flusher asks both at every message; summing
    #: twelve partitions' aggregates each time cost 3.5 µs a message.
    _keys: int = 0
    _docs: int = 0
    #: The aggregate the last message went to, with its keys and documents after it: the next
    #: message of the same partition starts from them instead of asking again (a message of one
    #: event asked four times).
    _last_aggregate: A | None = None
    _last_keys: int = 0
    _last_docs: int = 0

    def aggregates(self) -> list[A]:
        """Every aggregate of the batch: one, or one per source partition."""
        return list(self.by_tp.values()) if self.by_tp is not None else [self.aggregate]

    def _aggregate_of(self, tp: TP) -> A:
        if self.by_tp is None:
            return self.aggregate
        agg = self.by_tp.get(tp)
        if agg is None:
            assert self.factory is not None
            agg = self.by_tp[tp] = self.factory()
        return agg

    def ingest_message(
        self, tp: TP, offset: int, lines: list[bytes], ack: object, start: int | None = None, ts: int = 0
    ) -> None:
        """Aggregate one Kafka message's events; remember its position and its ack handle.

        ``start`` is the partition's stored position before this batch (kept from
        the first message of each partition).
        """
        self._open(tp, start)
        clock = self.clock
        aggregate = self._aggregate_of(tp)
        ingest, part = aggregate.ingest, tp[1]
        if aggregate is self._last_aggregate:
            keys, docs = self._last_keys, self._last_docs
        else:
            keys, docs = len(aggregate), aggregate.documents()
        if clock is not None:
            # The record's own Kafka time when it has one: every reader of the record (a flush, its
            # redo, a family of documents running ahead of the others) decides alike.
            clock.at = ts / 1000 if ts > 0 else self.decided_at
        try:
            for i, raw in enumerate(lines):
                try:
                    rejection = ingest(raw, part)
                except Exception as exc:  # a decoder's bug: a dead letter, not a crash loop on this offset
                    rejection = raised(exc, raw)
                if rejection is not None:
                    self.dead.append(DeadLetter(rejection, tp[0], part, offset, i))
        finally:
            if clock is not None:
                clock.at = None
            now_keys, now_docs = len(aggregate), aggregate.documents()
            self._keys += now_keys - keys
            self._docs += now_docs - docs
            self._last_aggregate, self._last_keys, self._last_docs = aggregate, now_keys, now_docs
        self._took(Received(tp, offset, lines, ack, start, ts=ts))

    def refuse_message(self, m: Received, reason: str, detail: str, kept: list[DeadLetter]) -> None:
        """Take message ``m`` with every event refused (``reason``): counted as dead letters, not aggregated.

        ``kept``: the message's own earlier refusals (a decoder's), kept as they were.
        """
        self._open(m.tp, m.start)
        own = {d.line: d for d in kept if (d.topic, d.partition, d.offset) == (m.tp[0], m.tp[1], m.offset)}
        for i, raw in enumerate(m.lines):
            letter = own.get(i) or DeadLetter(Rejection(reason, detail, raw), m.tp[0], m.tp[1], m.offset, i)
            self.dead.append(letter)
        self._took(m)

    def _open(self, tp: TP, start: int | None) -> None:
        """A partition's stored start, and the batch's opening instants, at its first message."""
        if tp not in self.start:
            self.start[tp] = start
        if not self.opened:
            self.opened = time.monotonic()
        if not self.decided_at:
            self.decided_at = self.clock.wall() if self.clock is not None else time.time()

    def _took(self, m: Received) -> None:
        """Count message ``m``'s events and remember its position, ack and lines."""
        n = len(m.lines)
        self.events += n
        self.events_by_tp[m.tp] = self.events_by_tp.get(m.tp, 0) + n
        span = self.offsets.get(m.tp)
        self.offsets[m.tp] = (m.offset, m.offset) if span is None else (span[0], m.offset)
        self.acks.append(m.ack)
        self.last[m.tp] = (m.ts, m.lines)
        self.messages.append(m)

    def skip(self, ack: object) -> None:
        """A replayed message already counted in MongoDB: ack it with the batch, count nothing."""
        self.acks.append(ack)
        self.skipped += 1
        self.messages.append(Received(("", -1), -1, [], ack, None, skipped=True))

    def fences(self, docs: int) -> list[Fence]:
        """Per partition: the position MongoDB must hold, where this batch moves it, its figures."""
        rejected: dict[TP, dict[str, int]] = {}
        for d in self.dead:
            r = rejected.setdefault((d.topic, d.partition), {})
            r[d.rejection.reason] = r.get(d.rejection.reason, 0) + 1
        out = []
        for i, ((t, p), (begin, last)) in enumerate(self.offsets.items()):
            first = i == 0
            out.append(
                Fence(
                    t,
                    p,
                    self.start.get((t, p)),
                    last + 1,
                    begin=begin,
                    events=self.events_by_tp.get((t, p), 0),
                    rejected=rejected.get((t, p), {}),
                    docs=docs if first else 0,
                    flushes=1 if first else 0,
                    last=self._fingerprint((t, p), last),
                    decided_at=self.decided_at or None,
                    decisions=self.decisions.get((t, p)),
                )
            )
        return out

    def _fingerprint(self, tp: TP, offset: int) -> dict[str, Any] | None:
        if tp not in self.last:
            return None
        ts, lines = self.last[tp]
        # The digest the log check computes from the record's value (its lines, blank ones
        # skipped), whatever this stream took of it: a stage's binary message is taken whole,
        # and may hold newline bytes.
        return Fingerprint(offset, ts, digest(list(unpack(b"\n".join(lines))))).as_doc()

    def empty(self) -> bool:
        """True when no message was ingested."""
        return not self.acks

    def pending_keys(self) -> int:
        """Items held in memory: distinct aggregate keys plus dead letters."""
        if self.by_tp is None:
            return len(self.aggregate) + len(self.dead)
        return self._keys + len(self.dead)

    def documents(self) -> int:
        """Documents this batch's commit writes, at most."""
        if self.by_tp is None:
            return self.aggregate.documents()
        return self._docs

    def splittable(self) -> bool:
        """True when the batch holds at least two counted messages (it can be halved)."""
        return sum(1 for m in self.messages if not m.skipped) >= 2

    def split(self, factory: Callable[[], A]) -> tuple[PendingBatch[A], PendingBatch[A]]:
        """Two batches holding the first and the second half of this one's messages, in order.

        The second half starts, on every partition the first half touched, where the
        first half ends: committed one after the other they move the stored
        positions exactly as this batch would have.
        """
        counted = [i for i, m in enumerate(self.messages) if not m.skipped]
        if len(counted) < 2:
            raise ValueError("a batch of one message cannot be split")
        cut = counted[len(counted) // 2]
        per_tp = self.by_tp is not None
        first, second = new_batch(factory, per_tp, self.clock), new_batch(factory, per_tp, self.clock)
        for half, part in ((first, self.messages[:cut]), (second, self.messages[cut:])):
            half.dead_sent = self.dead_sent
            half.decided_at = self.decided_at  # the halves decide as the whole did
            for m in part:
                if m.skipped:
                    half.skip(m.ack)
                else:
                    # m.start is the partition's position just before m: the end of the first half.
                    half.ingest_message(m.tp, m.offset, m.lines, m.ack, m.start, m.ts)
        return first, second

    def rejected_by_reason(self) -> dict[str, int]:
        """Count of refused events per reason code."""
        out: dict[str, int] = {}
        for d in self.dead:
            out[d.rejection.reason] = out.get(d.rejection.reason, 0) + 1
        return out


def new_batch(
    factory: Callable[[], A], per_partition: bool = False, clock: DecisionClock | None = None
) -> PendingBatch[A]:
    """An empty batch around a fresh aggregate (or, ``per_partition``, one per source partition)."""
    if per_partition:
        return PendingBatch(aggregate=factory(), by_tp={}, factory=factory, clock=clock)
    return PendingBatch(aggregate=factory(), clock=clock)
