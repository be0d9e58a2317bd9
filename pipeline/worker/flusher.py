"""The flush loop shared by every stream kind: fence, write, then ack.

Order of a flush (the commit order of quix-streams, made exactly-once): swap out the
pending batch; send its dead letters and wait for the broker's acknowledgement;
commit its planned upserts *and its source offsets* in one MongoDB transaction that
first checks the stored offsets still equal the batch's starting positions (the
fence); only then ack its Kafka messages so that Faust commits their offsets.

* A crash before the transaction commits loses nothing: nothing was written, the
  messages were not committed, they are delivered again.
* A crash after it and before Kafka's commit re-delivers counted messages: their
  offsets are below MongoDB's stored position, so :class:`Positions` skips them.
* A worker that lost its partitions without noticing (a zombie) fails the fence:
  its batch is dropped, unacked, and the process exits with :data:`EXIT_FENCED`.
* A failed write is retried with backoff, forever, while the batch stays unacked;
  the agent stops consuming once pending items reach the bound (backpressure).
* Every commit is bounded (:mod:`pipeline.worker.bounds`): a batch is sealed once
  its documents or estimated bytes reach the commit bound, and a commit that fails
  because it is too large or too slow (:func:`pipeline.store.errors.shrinks`) is
  split into two contiguous halves instead of being sent again as it was.

See docs/exactly-once.md for the argument in full.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Generic

from pipeline.core.clock import DecisionClock
from pipeline.core.commit import TP, FenceConflict, Sink
from pipeline.core.envelope import events_of
from pipeline.worker.accounting import Accounting, FlushStats
from pipeline.worker.batch import A, PendingBatch, new_batch
from pipeline.worker.bounds import CommitBound
from pipeline.worker.committer import Ack, BatchCommitter, ReadRange, SendDead, StreamPorts
from pipeline.worker.cursors import Positions
from pipeline.worker.gate import PartitionChecks, PartitionGate
from pipeline.worker.letgo import Incoming, LetGoReader
from pipeline.worker.policy import FlushHooks, FlushPolicy
from pipeline.worker.retry import Retrier

log = logging.getLogger("preagg.flush")

#: Seconds between two notes of routine backpressure pauses; a pause this long is a WARNING.
BACKPRESSURE_NOTE_SECONDS = 60.0
#: Sealed batches waiting for their commit before consumption pauses (backpressure).
MAX_SEALED = 2
#: Events taken from one list of messages between two yields to the event loop.
YIELD_EVERY = 5000


class Flusher(Generic[A]):
    """Holds the pending batch of one stream kind, feeds it, seals it, and flushes it in order.

    The jobs around it are objects of their own: :class:`~pipeline.worker.gate.PartitionGate`
    (positions and partition checks), :class:`~pipeline.worker.committer.BatchCommitter` (one
    batch's commit), :class:`~pipeline.worker.retry.Retrier` (retries, the commit token,
    permanent errors) and :class:`~pipeline.worker.accounting.Accounting` (totals, logs).
    """

    def __init__(
        self,
        stream: str,
        factory: Callable[[], A],
        sink: Sink,
        send_dead: SendDead | None,
        ack: Ack,
        policy: FlushPolicy,
        bound: CommitBound | None = None,
        hooks: FlushHooks | None = None,
        checks: PartitionChecks | None = None,
        read_range: ReadRange | None = None,
        clock: DecisionClock | None = None,
        let_go: bool = False,
        events: Callable[[bytes | None], list[bytes]] = events_of,
    ) -> None:
        self.stream = stream
        self.policy = policy
        self.hooks = hooks or FlushHooks()
        #: The decoders' clock (the kind's StreamContext.clock): pinned to each batch's instant.
        self.clock = clock
        #: Idempotent writes (exactly-once without a transaction; docs/exactly-once.md): one
        #: aggregate per source partition, marked upserts, a cut-short flush written again.
        self.marked = policy.marked and sink.exactly_once
        #: Set by the flush loop while it lets the batch grow through a backlog (for /health).
        self.deferring = False
        #: What the hooks were last told (:meth:`_tell_busy`): writing a commit or catching up.
        self._busy = False
        self._factory = factory
        self._events = events
        self.sink = sink
        #: The sink's mode, read once: it is consulted for every message.
        self._exactly_once = sink.exactly_once
        self._ack = ack
        #: When a pause was last logged, and the pauses since (routine in a backlog: one
        #: INFO line a minute, not one a second; a long pause is a WARNING).
        self._pause_noted = -BACKPRESSURE_NOTE_SECONDS
        self._pauses_unnoted = 0
        #: When a batch is sealed (documents, bytes, time per commit).
        self.bound = bound or CommitBound(2000, 8_000_000, 5.0)
        self.stats = FlushStats()
        self.retry = Retrier(stream, self.stats, policy.max_backoff, self.hooks.on_stuck, sink.failure)
        self.gate = PartitionGate(sink, self.retry, checks, self.marked)
        self.committer: BatchCommitter[A] = BatchCommitter(
            StreamPorts(stream, factory, sink, send_dead, ack, read_range, clock, events),
            policy,
            self.bound,
            self.hooks,
            self.retry,
            Accounting(stream, self.stats),
            self.marked,
            lambda: self._epoch,
        )
        self.batch: PendingBatch[A] = new_batch(factory, self.marked, clock)
        #: Batches sealed and not yet committed, oldest first (contiguous per partition).
        self.sealed: collections.deque[PendingBatch[A]] = collections.deque()
        #: The batch being committed (taken off ``sealed``), for the memory bound and the stop report.
        self.in_flight: PendingBatch[A] | None = None
        self._lock = asyncio.Lock()
        #: Bumped by :meth:`abandon`: messages delivered before it are not ingested any more.
        self._epoch = 0
        #: The task running :meth:`flush` now (what :meth:`abandon` cancels).
        self._flush_task: asyncio.Task[None] | None = None
        #: A reader that shares its consumer with a family flushed ahead lets go of records at
        #: its memory bound instead of stopping the consumer (:mod:`pipeline.worker.letgo`).
        self.let_go = LetGoReader(self, read_range) if let_go and read_range is not None else None

    # -- what others read ---------------------------------------------------------

    @property
    def max_pending_keys(self) -> int:
        """Items in memory before consumption pauses."""
        return self.policy.max_pending_keys

    @property
    def positions(self) -> Positions:
        """Ingest cursors per partition (loaded from the ledgers)."""
        return self.gate.positions

    @property
    def consumed(self) -> dict[TP, int]:
        """Next offset to consume per partition (what the worker has read, counted or not)."""
        return self.gate.consumed

    @property
    def diverged(self) -> dict[TP, str]:
        """Partitions held back (their log is not their ledger's), with the reason."""
        return self.gate.diverged

    @property
    def stuck(self) -> str | None:
        """A permanent write error escalated (``None``: none)."""
        return self.retry.stuck

    def contended(self) -> bool:
        """True while commits take the commit token (a recent write conflict)."""
        return self.retry.contended()

    # -- feeding ----------------------------------------------------------------

    async def receive(self, tp: TP, offset: int, value: bytes | None, ack: object, ts: int = 0) -> None:
        """Take one Kafka message (see :meth:`receive_many`)."""
        await self.receive_many(tp, [(offset, value, ack, ts)])

    async def receive_many(self, tp: TP, messages: Sequence[Incoming]) -> bool:
        """Take Kafka messages of one partition, in offset order: check the partition, ingest each.

        ``ts`` of a message is the record's timestamp in milliseconds (the ledger
        fingerprints the last record it counted). A partition is checked against its
        ledger when its position was just loaded and whenever the consumer's position
        moves backwards, which within one partition's messages in offset order can only
        happen at the first. Backpressure and the commit bound are checked per message,
        so a list behaves exactly as its messages one by one. ``False``: the flusher was
        abandoned meanwhile (a rebalance past its drain bound), and the rest of the list was
        not taken: it is read again after the rebalance.
        """
        if not messages:
            return True
        epoch = self._epoch
        if self.let_go is not None:
            if self.let_go.ranges.fenced_off(tp, messages[0][0]):
                self.let_go.refused(tp, messages)
                return False  # past records released at a rebalance: read again after it
            if self.let_go.ranges.holds(tp, messages[0][0]):
                return await self.let_go.let_go_of(tp, messages, epoch)
        if self.sink.exactly_once:
            if not self.positions.known(tp):
                await self.load_positions([tp])
            first = messages[0][0]
            fresh = tp in self.gate.fresh
            if (fresh or first < self.consumed.get(tp, 0)) and not await self.gate.same_log(tp):
                self.gate.fresh.discard(tp)
            if self._epoch != epoch:
                return False  # abandoned while the store was asked: the records are read again after it
            if tp in self.diverged:
                self.stats.held_back += len(messages)
                await self._ack([m[2] for m in messages])  # for Kafka only: the ledger says "not counted"
                return True
            if fresh:
                self.gate.fresh.discard(tp)
                stored = self.positions.get(tp)
                if stored is not None and first > stored and self.gate.checks is not None:
                    await self.gate.gap(tp, stored, first)
                    if self._epoch != epoch:
                        return False
        bound, limit, let_go = self.bound, self.max_pending_keys, self.let_go
        held = self._held_keys()  # sealed and in-flight batches change only while this awaits
        mark = self.batch.events
        for i, (offset, value, ack, ts) in enumerate(messages):
            b = self.batch
            if len(self.sealed) >= MAX_SEALED or held + b.pending_keys() >= limit:
                if let_go is not None and let_go.take(tp, messages[i:]):
                    return True
                await self._backpressure()
                if self._epoch != epoch:
                    return False  # abandoned (rebalance past its drain bound): not ingested, not acked
                b, held, mark = self.batch, self._held_keys(), self.batch.events
            before = b.documents()
            self.ingest(tp, offset, value, ack, ts)
            after = b.documents()
            if bound.full(after, after - before):
                self.stats.sealed += 1
                self._seal()
                self.hooks.on_sealed()
                held, mark = self._held_keys(), 0
            elif b.events - mark >= YIELD_EVERY:
                # A list of packed messages can hold a million events: let the flush loop's
                # commit (I/O) go on meanwhile.
                await asyncio.sleep(0)
                if self._epoch != epoch:
                    return False
                mark = self.batch.events
        return True

    async def load_positions(self, tps: Sequence[TP]) -> None:
        """Read stored positions (retried); with idempotent writes, cut-short flushes written again first."""
        await self.gate.load_positions(self.stream, tps, self.committer.redo)

    async def recheck(self, tp: TP) -> bool:
        """The incarnation check again, for a partition that stopped moving (the guard's watch)."""
        return await self.gate.same_log(tp)

    def ingest(self, tp: TP, offset: int, value: bytes | None, ack: object, ts: int = 0) -> None:
        """Aggregate one message (single or packed events), or skip it if already counted."""
        self.consumed[tp] = offset + 1
        if self._exactly_once:
            start = self.positions.get(tp)
            if not self.positions.accept(tp, offset):
                self.batch.skip(ack)
                return
        else:
            start = None
        self.batch.ingest_message(tp, offset, self._events(value), ack, start, ts)

    def batch_age(self) -> float:
        """Seconds since the batch being filled took its first message (0: empty)."""
        return time.monotonic() - self.batch.opened if self.batch.opened else 0.0

    def pending_keys(self) -> int:
        """Items in memory: the batch being filled, the sealed ones and the one being written."""
        return sum(b.pending_keys() for b in self._uncommitted())

    def _held_keys(self) -> int:
        """Items in memory besides the batch being filled: sealed batches and the one being written."""
        return sum(b.pending_keys() for b in self._uncommitted()[1:])

    def uncommitted_events(self) -> int:
        """Events taken from Kafka and not committed yet (what a stop now would leave to replay)."""
        return sum(b.events for b in self._uncommitted())

    def _uncommitted(self) -> list[PendingBatch[A]]:
        """The batch being filled, the sealed ones and the one being committed."""
        return [self.batch, *self.sealed, *([self.in_flight] if self.in_flight else [])]

    def _seal(self) -> None:
        """Close the batch being filled: it commits on its own, after the sealed ones before it."""
        if not self.batch.empty():
            self.sealed.append(self.batch)
            self.batch = new_batch(self._factory, self.marked, self.clock)

    def has_room(self) -> bool:
        """Whether a message taken now stays under the memory bound."""
        return len(self.sealed) < MAX_SEALED and self.pending_keys() < self.max_pending_keys

    @property
    def epoch(self) -> int:
        """Bumped by :meth:`abandon`: what was read before it is not taken any more."""
        return self._epoch

    def release(self) -> dict[TP, int]:
        """Forget what was let go of (a rebalance or a stop): Kafka's committed offsets are below it,
        so it is read again from there. Returns each partition's first offset let go of."""
        return {} if self.let_go is None else self.let_go.release()

    def idle(self, held: Iterable[Any], highwater: Callable[[Any], int | None]) -> set[int]:
        """The partitions of ``held`` (Kafka's) read to their ``highwater`` (the end the consumer
        knows) with none of their records in a batch still to flush: a forwarded message may say
        so of them."""
        pending = self._unflushed()
        out = set()
        for tp in held:
            key = (tp.topic, tp.partition)
            high = highwater(tp)
            read = self.consumed.get(key)
            if key not in pending and high is not None and (read >= high if read is not None else high == 0):
                out.add(tp.partition)
        return out

    def _unflushed(self) -> set[TP]:
        """The partitions with records in the batch being filled or in a sealed one."""
        return set(self.batch.offsets).union(*(b.offsets for b in self.sealed))

    def forget_positions(self, tps: Sequence[TP], held: Collection[TP] = ()) -> None:
        """After a rebalance: drop cached positions of partitions with nothing pending, and the
        fences of released records of partitions no longer ``held``."""
        pending = self._unflushed()
        self.gate.forget([tp for tp in tps if tp not in pending])
        if self.let_go is not None:
            self.let_go.ranges.unfence(held)

    async def _backpressure(self) -> None:
        s = self.stats
        began = time.monotonic()
        s.backpressure_pauses += 1
        s.paused_since = time.time()
        if began - self._pause_noted >= BACKPRESSURE_NOTE_SECONDS:
            log.info(
                "backpressure: %d %s items pending (bound %d), %d batches sealed (bound %d); "
                "consumption paused until a flush succeeds (%d more pauses since the last note; "
                "routine while catching up a backlog)",
                self.pending_keys(),
                self.stream,
                self.max_pending_keys,
                len(self.sealed),
                MAX_SEALED,
                self._pauses_unnoted,
            )
            self._pause_noted = began
            self._pauses_unnoted = 0
        else:
            self._pauses_unnoted += 1
        try:
            await self.run_flush()
        finally:
            took = time.monotonic() - began
            s.backpressure_seconds += took
            s.paused_since = None
            if took >= BACKPRESSURE_NOTE_SECONDS:  # a flush that long: the store is struggling
                log.warning("backpressure: %s consumption resumed after %.1fs", self.stream, took)

    # -- flushing ---------------------------------------------------------------

    async def run_flush(self, sealed_only: bool = False) -> None:
        """:meth:`flush` in a task of its own, shielded from the caller's cancellation.

        A consumer stopping while it waits must not cut a commit in half; and when
        :meth:`abandon` cancels the flush, the caller (the flush loop, a consumer waiting
        at the memory bound) goes on instead of dying with it.
        """
        task = asyncio.ensure_future(self.flush(sealed_only))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or current.cancelling() == 0):
                return  # abandoned, not cancelled itself
            raise

    async def abandon(self) -> int:
        """Drop every uncommitted batch, unacked; returns the events dropped.

        For a rebalance whose drain waited past its bound (the store is down or slow):
        the member must rejoin before Kafka's rebalance timeout evicts it, and an evicted
        member's late commit would fence the partitions' new owner. Dropping is safe
        under exactly-once: nothing dropped was acked, so Kafka's committed offsets stay
        below it and whoever owns each partition next reads it again from there, skipping
        what MongoDB's ledger says was counted. A commit in flight is cancelled (its
        transaction aborts; if the server had already applied it, its ledger move makes
        the re-read records skip). Messages delivered before this are not ingested.
        """
        self._epoch += 1
        if self.let_go is not None:
            self.let_go.stop()
        dropped = self.uncommitted_events()
        task = self._flush_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.sealed.clear()
        self.in_flight = None
        self.batch = new_batch(self._factory, self.marked, self.clock)
        self.gate.clear()
        self.stats.abandoned_events += dropped
        self.stats.abandons += 1
        return dropped

    async def flush(self, sealed_only: bool = False) -> None:
        """Commit the sealed batches, then (unless ``sealed_only``) the one being filled. Serialised.

        Batches sealed while this flush runs wait for the next one, so one busy
        stream does not hold the flush loop. While sealed batches wait (a backlog),
        the batch being filled is left to grow to the bound: sealing it early would
        add a small transaction per flush, each paying a commit's fixed cost.
        """
        epoch = self._epoch
        async with self._lock:
            if self._epoch != epoch:
                return  # asked for before abandon(): what it was to commit is gone
            self._flush_task = asyncio.current_task()
            if not sealed_only and not self.sealed:
                self._seal()
            if self.sealed:
                self.stats.flush_started_at = time.time()
            self._tell_busy(bool(self.sealed) or self.deferring)
            try:
                await self._flush_sealed()
            finally:
                self.stats.flush_started_at = None
                self._tell_busy(self.deferring)  # a backlog's next commit follows: still busy

    def _tell_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.hooks.on_busy(busy)

    async def _flush_sealed(self) -> None:
        """Commit the sealed batches in order (the lock is held)."""
        todo = len(self.sealed)
        while todo > 0 and self.sealed:
            head = self.sealed.popleft()
            self.in_flight = head
            try:
                halves = await self.committer.commit(head)
            except FenceConflict:
                self.sealed.clear()  # later batches start where the dropped one ended
                return
            finally:
                self.in_flight = None
            if halves is None:
                todo -= 1
            else:
                self.sealed.extendleft(reversed(halves))
                todo += 1
