"""A reader that lets go of records at its memory bound, and reads them again from Kafka later.

Two readers share one consumer when a family of documents is flushed ahead of the pages
(pipeline/core/families.py). Were the pages' reader to wait at its memory bound, the
consumer would stop, and the family's reader with it: the small documents a live chart
reads would wait on a store busy with the pages. So the pages' reader lets go instead:
from the first record of a partition it cannot take, it takes nothing more of that
partition from the consumer, and reads the range again from Kafka once it has room, as a
redo does. It acks nothing it let go of, so Kafka's committed offset stays below the
range, and a rebalance or a stop reads it again from there (docs/exactly-once.md).

The records let go of are bounded (the joint ack remembers the other reader's ack of
each): past the bound the reader waits, as it did at its memory bound before. :class:`LetGo`
is the bookkeeping (pure); :class:`LetGoReader` the reading again, one task per reader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Sequence
from typing import NamedTuple, Protocol

from pipeline.core.commit import TP
from pipeline.worker.accounting import FlushStats
from pipeline.worker.committer import ReadRange, read_retried
from pipeline.worker.cursors import Positions
from pipeline.worker.retry import Retrier

log = logging.getLogger("preagg.flush")

#: Offsets read again from Kafka at a time.
REREAD_CHUNK = 5000

#: One Kafka message as a flusher takes it: offset, value, ack handle, timestamp (ms, 0 if none).
Incoming = tuple[int, bytes | None, object, int]


class Reader(Protocol):
    """What of a flusher its letting go uses (pipeline/worker/flusher.py)."""

    stats: FlushStats
    retry: Retrier

    @property
    def max_pending_keys(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def positions(self) -> Positions: ...
    def has_room(self) -> bool: ...
    def ingest(self, tp: TP, offset: int, value: bytes | None, ack: object, ts: int = 0) -> None: ...
    async def receive_many(self, tp: TP, messages: Sequence[Incoming]) -> bool: ...
    async def run_flush(self, sealed_only: bool = False) -> None: ...
    async def load_positions(self, tps: Sequence[TP]) -> None: ...


class Handle(NamedTuple):
    """The ack handle of a record read again: what acks need of a Kafka record."""

    topic: str
    partition: int
    offset: int


class LetGo:
    """Per partition, the range let go of: ``[start, end)``, ``end`` past the last record delivered;
    and once released, its start as a *fence* until Kafka delivers the partition from there again."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.start: dict[TP, int] = {}
        self.end: dict[TP, int] = {}
        #: Per partition released with records let go of, the first of them. A list delivered
        #: before the rebalance and handed over after the release (it waited behind the other
        #: reader's backpressure) starts past it: taken, it would count its records and move the
        #: ledger over the ones let go of, which nothing would count again. Such a list is not
        #: taken until the consumer reads the partition again from at or below the fence.
        self.fenced: dict[TP, int] = {}
        #: Bumped by :meth:`release`: a reader waiting for room takes nothing after it.
        self.generation = 0
        #: Records let go of, and records read again, since the start (metrics).
        self.let_go = 0
        self.reread = 0
        #: Records not taken because a fence stood before them (metrics).
        self.fenced_records = 0

    def behind(self) -> int:
        """Records let go of and not read again yet (offsets: gaps count, an upper bound)."""
        return sum(self.end[tp] - s for tp, s in self.start.items())

    def full(self) -> bool:
        return self.behind() >= self.bound

    def fenced_off(self, tp: TP, first: int) -> bool:
        """Whether a list of ``tp`` starting at ``first`` is past a released range (not to be taken);
        a list at or below the fence is the partition read again, and lifts it."""
        fence = self.fenced.get(tp)
        if fence is None:
            return False
        if first <= fence:
            del self.fenced[tp]
            return False
        return True

    def unfence(self, held: Collection[TP]) -> None:
        """Lift the fences of partitions not ``held`` any more (an assignment): their next owner
        reads them from Kafka's committed offset, and should they come back here, they come back
        from wherever it counted them to."""
        for tp in [tp for tp in self.fenced if tp not in held]:
            del self.fenced[tp]

    def holds(self, tp: TP, first: int) -> bool:
        """Whether the list starting at ``first`` goes behind what ``tp`` already let go of.

        A list at or below the range's start is the consumer reading again from Kafka's
        committed offset (after a rebalance): the range is dropped and the list taken.
        """
        start = self.start.get(tp)
        if start is None:
            return False
        if first <= start:
            self.drop(tp)
            return False
        return True

    def add(self, tp: TP, first: int, last: int, count: int) -> None:
        """Let go of ``count`` delivered records, ``first`` to ``last`` (offsets)."""
        self.start.setdefault(tp, first)
        self.end[tp] = last + 1
        self.let_go += count

    def next_range(self, chunk: int) -> tuple[TP, int, int] | None:
        """The next range to read again: the partition furthest behind, at most ``chunk`` offsets."""
        if not self.start:
            return None
        tp = max(self.start, key=lambda t: self.end[t] - self.start[t])
        start = self.start[tp]
        return tp, start, min(self.end[tp], start + chunk)

    def advance(self, tp: TP, start: int, to: int) -> bool:
        """Records ``[start, to)`` were taken again; ``False``: the range changed meanwhile (not taken)."""
        if self.start.get(tp) != start:
            return False
        if to >= self.end[tp]:
            self.drop(tp)
        else:
            self.start[tp] = to
        return True

    def drop(self, tp: TP) -> None:
        self.start.pop(tp, None)
        self.end.pop(tp, None)

    def release(self) -> dict[TP, int]:
        """Forget every range (a rebalance or a stop: Kafka reads them again), each start kept as a
        fence; returns the starts."""
        starts = dict(self.start)
        for tp, start in starts.items():
            self.fenced[tp] = min(start, self.fenced.get(tp, start))
        self.start.clear()
        self.end.clear()
        self.generation += 1
        return starts


class LetGoReader:
    """The letting go of one flusher, and the task reading again what it let go of."""

    def __init__(self, flusher: Reader, read_range: ReadRange) -> None:
        self.flusher, self.read_range = flusher, read_range
        #: As many records let go of as keys pending, at most (the joint ack remembers each).
        self.ranges = LetGo(flusher.max_pending_keys)
        self._task: asyncio.Task[None] | None = None
        #: Set whenever the task made room (a list waiting past the bound looks again).
        self._room = asyncio.Event()

    def take(self, tp: TP, messages: Sequence[Incoming]) -> bool:
        """Let go of ``messages`` (from the first the flusher cannot take); ``False``: past the bound."""
        if self.ranges.full():
            return False
        self.ranges.add(tp, messages[0][0], messages[-1][0], len(messages))
        self.start()
        return True

    async def let_go_of(self, tp: TP, messages: Sequence[Incoming], epoch: int) -> bool:
        """A list behind a range of its partition already let go of: let go of it too (past the
        bound, once the reading again made room). ``False``: not taken, read again after a rebalance."""
        ranges, f = self.ranges, self.flusher
        if self.take(tp, messages):
            return True
        generation, began = ranges.generation, time.monotonic()
        f.stats.backpressure_pauses += 1
        while ranges.full() and ranges.generation == generation and f.epoch == epoch:
            self.start()
            self._room.clear()
            await self._room.wait()
        f.stats.backpressure_seconds += time.monotonic() - began
        if ranges.generation != generation or f.epoch != epoch:
            return False  # released (a rebalance, a stop) or abandoned
        return await f.receive_many(tp, messages)  # the range may be read again by now

    def refused(self, tp: TP, messages: Sequence[Incoming]) -> None:
        """A list past a fence, not taken: counted and said (rare: once per list handed over late)."""
        self.ranges.fenced_records += len(messages)
        log.info(
            "%s[%d]: offsets %d..%d not taken: they follow records let go of from %d and released at "
            "a rebalance; read again after it, in order",
            *tp,
            messages[0][0],
            messages[-1][0],
            self.ranges.fenced[tp],
        )

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._read_again())
            self._task.add_done_callback(_failed)

    def release(self) -> dict[TP, int]:
        starts = self.ranges.release()
        self._room.set()
        return starts

    def stop(self) -> None:
        """The flusher was abandoned: forget every range and stop reading again."""
        self.release()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def _read_again(self) -> None:
        """Read again, in order, the ranges let go of, as room allows."""
        ranges, f = self.ranges, self.flusher
        epoch, generation = f.epoch, ranges.generation
        while f.epoch == epoch and ranges.generation == generation:
            todo = ranges.next_range(REREAD_CHUNK)
            if todo is None:
                return
            if not f.has_room():
                await f.run_flush()
                continue
            tp, start, end = todo
            records = await read_retried(f.retry, self.read_range, tp, start, end, " (let go of)")
            if f.epoch != epoch or ranges.start.get(tp) != start:
                continue
            if not f.positions.known(tp):
                await f.load_positions([tp])
                continue
            ranges.advance(tp, start, self._take_again(tp, records, end))
            self._room.set()

    def _take_again(self, tp: TP, records: Sequence[tuple[int, bytes | None, int]], end: int) -> int:
        """Ingest records read again while there is room; returns the offset to go on from."""
        f = self.flusher
        for offset, value, ts in records:
            if not f.has_room():
                return offset
            f.ingest(tp, offset, value, Handle(tp[0], tp[1], offset), ts)
            self.ranges.reread += 1
        return end


def _failed(task: asyncio.Task[None]) -> None:
    """The reading again ended in error: logged (the next list let go of starts it again)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("reading again what was let go of failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
