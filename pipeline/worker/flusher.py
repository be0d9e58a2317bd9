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
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol

from pipeline.core.clock import DecisionClock
from pipeline.core.envelope import unpack
from pipeline.core.incarnation import Verdict
from pipeline.core.logs import EACH_FLUSH
from pipeline.core.updates import DocUpdate, merge_sources, split_wide
from pipeline.store.errors import CommitTooLarge, outcome_unknown, permanent, shrinks
from pipeline.store.offsets import TP, Committed, Fence, FenceConflict, Ledgers, Pending
from pipeline.worker.batch import A, PendingBatch, new_batch
from pipeline.worker.bounds import CommitBound
from pipeline.worker.cursors import Positions
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.exits import EXIT_FENCED, exit_now
from pipeline.worker.memory import rss_bytes

log = logging.getLogger("preagg.flush")
each_flush_log = logging.getLogger(EACH_FLUSH)

#: Seconds between two notes of routine backpressure pauses; a pause this long is a WARNING.
BACKPRESSURE_NOTE_SECONDS = 60.0

#: Exit status of a worker that must restart to resume from MongoDB's positions:
#: its flush failed its offset fence (another worker counted the range), or Kafka's
#: committed offset was ahead of MongoDB's. A supervisor restarts it.
#: MongoDB's WriteConflict: a transaction aborted at once by another's write to the same document.
WRITE_CONFLICT = 112

#: Called when a partition's first message lies beyond MongoDB's stored position
#: (Kafka's committed offset is ahead): ``(tp, stored position, offset delivered)``.
#: The worker's handler re-points Kafka at the stored position and restarts, or
#: returns when the range is gone from Kafka (retention) and counting must go on.
OnGap = Callable[[TP, int, int], Awaitable[None]]
#: Is the partition Kafka serves the one the ledger describes? (see :mod:`pipeline.core.incarnation`)
CheckIncarnation = Callable[[TP], Awaitable[Verdict]]
OnDiverged = Callable[[TP, Verdict], Awaitable[None]]
SendDead = Callable[[Sequence[DeadLetter]], Awaitable[None]]
#: Acks the handles of committed messages, in the order they were received.
Ack = Callable[[Sequence[object]], Awaitable[object]]
#: One Kafka message as a flusher takes it: offset, value, ack handle, timestamp (ms, 0 if none).
Incoming = tuple[int, bytes | None, object, int]
Fault = Callable[[str], None]
#: Reads a partition's records ``[start, end)`` outside the group (``start`` ``None``: from the
#: log's beginning): ``(offset, value, timestamp ms)`` each. The worker's is a group-less consumer.
ReadRange = Callable[[TP, int | None, int], Awaitable[list[tuple[int, bytes | None, int]]]]


class Sink(Protocol):
    """Where flushes are committed (MongoDB; a fake in unit tests)."""

    @property
    def exactly_once(self) -> bool: ...

    async def ledgers(self, tps: Sequence[TP]) -> Ledgers:
        """Stored positions, and the partitions whose ledger records a flush cut short (idempotent writes)."""
        ...

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked: bool = False,
    ) -> Committed: ...

    async def outcome(self, fences: Sequence[Fence], flush_id: str) -> bool:
        """Whether flush ``flush_id`` committed (its ledgers), or ``FenceConflict``."""
        ...


#: Records a permanent write error (``None``: cleared) on the ledgers of some partitions.
OnStuck = Callable[[Sequence[TP], str | None], Awaitable[None]]

#: Attempts of a write that fails with a permanent error (pipeline.store.errors.permanent)
#: before it is escalated: logged as an ERROR with what to do, ``/health/live`` failing and a
#: PROBLEM in ``preagg status``. It is still retried (at the longest backoff), so that an
#: operator's fix of the document lets the flush through without a restart.
PERMANENT_ATTEMPTS = 5

#: Sealed batches waiting for their commit before consumption pauses (backpressure).
MAX_SEALED = 2
#: Events taken from one list of messages between two yields to the event loop.
YIELD_EVERY = 5000

#: After a write conflict, a stream's commits take its commit token first for this long
#: (seconds since the last conflict): workers that write the same documents (keyless
#: streams) then meet on one statement instead of halfway through their upserts.
CONTENDED_SECONDS = 300.0
#: Longest pause before retrying a commit that lost a write conflict: with the token the
#: conflict cost one statement, and a waiter must poll often to catch the token free.
CONFLICT_MAX_PAUSE = 0.5
#: A worker that just committed with the token waits this long (jittered) before taking it
#: again, so that workers waiting for it get their turn (measured: without the pause one
#: worker's batch waited 67 s while the others committed back to back).
TOKEN_HANDOFF = 0.6

#: Upper bounds (seconds) of the flush latency histogram.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class FlushStats:
    """Running totals of one flusher, for logs, the ops documents and metrics."""

    events: int = 0
    skipped: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    flushes: int = 0
    replayed_commits: int = 0
    docs: int = 0
    retries: int = 0
    last_flush_seconds: float = 0.0
    last_flush_at: float = 0.0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    backpressure_pauses: int = 0
    backpressure_seconds: float = 0.0
    paused_since: float | None = None
    #: Commit attempts that raised (each one also counts in ``retries`` or led to a split).
    failed_commits: int = 0
    #: Batches split in two after a commit failed for its size or duration.
    splits: int = 0
    #: Failed commits whose outcome was read from the ledgers before splitting.
    unknown_outcomes: int = 0
    #: When the flush running now began (epoch s; ``None``: none running), for ``/health``.
    flush_started_at: float | None = None
    #: Rebalance drains that passed their bound, and the uncommitted events they dropped.
    abandons: int = 0
    abandoned_events: int = 0
    #: Size/time failures of a batch of one message, which cannot be split (retried, logged).
    unsplittable: int = 0
    #: Batches sealed because they reached the commit bound (not by the flush timer).
    sealed: int = 0
    commit_bytes: int = 0
    #: Commits aborted by another transaction's write to the same document (retried, backed off).
    write_conflicts: int = 0
    #: Messages of diverged partitions, not counted (see ``Flusher.diverged``).
    held_back: int = 0
    #: Commit attempts that took the stream's commit token (after write conflicts).
    token_commits: int = 0
    #: Cut-short flushes whose range this worker wrote again (idempotent writes).
    redone: int = 0
    #: Write failures escalated as permanent (see ``PERMANENT_ATTEMPTS``), and events
    #: dead-lettered because the store refused their one-message batch for good.
    permanent_errors: int = 0
    unwritable: int = 0
    #: Idempotent writes: upserts refused with a duplicate key that their documents' marks
    #: showed applied; upserts sent again after another writer's insert; merged upserts
    #: sent again per partition (pipeline.store.sink, "_marked_writes").
    marks_applied: int = 0
    inserts_raced: int = 0
    shares_split: int = 0

    def observe(self, seconds: float) -> None:
        """Record one flush's latency in the histogram."""
        i = next((i for i, b in enumerate(LATENCY_BUCKETS) if seconds <= b), len(LATENCY_BUCKETS))
        self.latency_counts[i] += 1
        self.latency_sum += seconds


class Flusher(Generic[A]):
    """Holds the pending batch of one stream kind, feeds it, and flushes it."""

    def __init__(
        self,
        stream: str,
        factory: Callable[[], A],
        sink: Sink,
        send_dead: SendDead,
        ack: Ack,
        max_pending_keys: int,
        max_fields_per_update: int = 0,
        max_backoff: float = 30.0,
        fault: Fault | None = None,
        on_fenced: Callable[[FenceConflict], None] | None = None,
        on_gap: OnGap | None = None,
        before_plan: Callable[[A], Awaitable[object]] | None = None,
        before_plan_label: str = "before plan",
        bound: CommitBound | None = None,
        on_sealed: Callable[[], None] | None = None,
        check_incarnation: CheckIncarnation | None = None,
        on_diverged: OnDiverged | None = None,
        marked: bool = False,
        read_range: ReadRange | None = None,
        clock: DecisionClock | None = None,
        on_stuck: OnStuck | None = None,
        after_commit: Callable[[A], None] | None = None,
    ) -> None:
        self.stream = stream
        #: Told each aggregate of a batch once it is committed (hits: seal top pages once settled).
        self._after_commit = after_commit
        #: Records (or clears, ``None``) a permanent write error on the partitions' ledgers, for status.
        self._on_stuck = on_stuck
        #: A permanent write error met :data:`PERMANENT_ATTEMPTS` times in a row, escalated
        #: (``/health/live`` fails, ``preagg status`` shows a PROBLEM); ``None``: none.
        self.stuck: str | None = None
        self._permanent_in_a_row = 0
        #: Set by ``_give_up`` when the failed commit is one message that cannot be split.
        self._unsplittable: str | None = None
        #: The decoders' clock (the kind's StreamContext.clock): pinned to each batch's instant.
        self.clock = clock
        #: Idempotent writes (exactly-once without a transaction; docs/exactly-once.md): one
        #: aggregate per source partition, marked upserts, a cut-short flush written again.
        self.marked = marked and sink.exactly_once
        self._read_range = read_range
        #: Set by the flush loop while it lets the batch grow through a backlog (for /health).
        self.deferring = False
        self._factory = factory
        self.sink = sink
        #: The sink's mode, read once: it is consulted for every message.
        self._exactly_once = sink.exactly_once
        self._send_dead = send_dead
        self._ack = ack
        self.max_pending_keys = max_pending_keys
        #: When a pause was last logged, and the pauses since (routine in a backlog: one
        #: INFO line a minute, not one a second; a long pause is a WARNING).
        self._pause_noted = -BACKPRESSURE_NOTE_SECONDS
        self._pauses_unnoted = 0
        self.max_fields_per_update = max_fields_per_update
        self.max_backoff = max_backoff
        self._fault = fault or (lambda point: None)
        self._on_fenced = on_fenced or exit_fenced
        self._on_gap = on_gap
        #: I/O a batch needs before it can plan (the name store's tokens), retried as writes are.
        #: A step the kind runs on a batch before its plan (hits: resolve name-store tokens).
        self._before_plan = before_plan
        self._before_plan_label = before_plan_label
        #: When a batch is sealed (documents, bytes, time per commit).
        self.bound = bound or CommitBound(2000, 8_000_000, 5.0)
        self._on_sealed = on_sealed or (lambda: None)
        self._check_incarnation = check_incarnation
        self._on_diverged = on_diverged
        #: Partitions whose log is not the one their ledger describes: nothing of them is counted
        #: until an operator resets the ledger (``preagg positions reset``); reason per partition.
        self.diverged: dict[TP, str] = {}
        self.batch: PendingBatch[A] = new_batch(factory, self.marked, clock)
        #: Batches sealed and not yet committed, oldest first (contiguous per partition).
        self.sealed: collections.deque[PendingBatch[A]] = collections.deque()
        #: The batch being committed (taken off ``sealed``), for the memory bound and the stop report.
        self.in_flight: PendingBatch[A] | None = None
        self.positions = Positions()
        #: Partitions whose position was just loaded and whose first message is awaited.
        self._fresh: set[TP] = set()
        #: Next offset to consume per partition (what the worker has read, counted or not).
        self.consumed: dict[TP, int] = {}
        self.stats = FlushStats()
        self._lock = asyncio.Lock()
        #: Monotonic time until which commits take the commit token (see CONTENDED_SECONDS).
        self._contended_until = 0.0
        #: Monotonic time the last commit that took the token ended.
        self._token_released = 0.0
        #: Bumped by :meth:`abandon`: messages delivered before it are not ingested any more.
        self._epoch = 0
        #: The task running :meth:`flush` now (what :meth:`abandon` cancels).
        self._flush_task: asyncio.Task[None] | None = None

    # -- feeding ----------------------------------------------------------------

    async def receive(self, tp: TP, offset: int, value: bytes | None, ack: object, ts: int = 0) -> None:
        """Take one Kafka message (see :meth:`receive_many`)."""
        await self.receive_many(tp, [(offset, value, ack, ts)])

    async def receive_many(self, tp: TP, messages: Sequence[Incoming]) -> None:
        """Take Kafka messages of one partition, in offset order: check the partition, ingest each.

        ``ts`` of a message is the record's timestamp in milliseconds (the ledger
        fingerprints the last record it counted). A partition is checked against its
        ledger when its position was just loaded and whenever the consumer's position
        moves backwards, which within one partition's messages in offset order can only
        happen at the first. Backpressure and the commit bound are checked per message,
        so a list behaves exactly as its messages one by one.
        """
        if not messages:
            return
        epoch = self._epoch
        if self.sink.exactly_once:
            if not self.positions.known(tp):
                await self.load_positions([tp])
            first = messages[0][0]
            fresh = tp in self._fresh
            if (fresh or first < self.consumed.get(tp, 0)) and not await self._same_log(tp):
                self._fresh.discard(tp)
            if self._epoch != epoch:
                return  # abandoned while the store was asked: the records are read again after it
            if tp in self.diverged:
                self.stats.held_back += len(messages)
                await self._ack([m[2] for m in messages])  # for Kafka only: the ledger says "not counted"
                return
            if fresh:
                self._fresh.discard(tp)
                stored = self.positions.get(tp)
                if stored is not None and first > stored and self._on_gap is not None:
                    await self._gap(tp, stored, first)
                    if self._epoch != epoch:
                        return
        bound, limit = self.bound, self.max_pending_keys
        held = self._held_keys()  # sealed and in-flight batches change only while this awaits
        mark = self.batch.events
        for offset, value, ack, ts in messages:
            b = self.batch
            if len(self.sealed) >= MAX_SEALED or held + b.pending_keys() >= limit:
                await self._backpressure()
                if self._epoch != epoch:
                    return  # abandoned (rebalance past its drain bound): not ingested, not acked
                b, held, mark = self.batch, self._held_keys(), self.batch.events
            before = b.documents()
            self.ingest(tp, offset, value, ack, ts)
            after = b.documents()
            if bound.full(after, after - before):
                self.stats.sealed += 1
                self._seal()
                self._on_sealed()
                held, mark = self._held_keys(), 0
            elif b.events - mark >= YIELD_EVERY:
                # A list of packed messages can hold a million events: let the flush loop's
                # commit (I/O) go on meanwhile.
                await asyncio.sleep(0)
                if self._epoch != epoch:
                    return
                mark = self.batch.events

    async def _gap(self, tp: TP, stored: int, first: int) -> None:
        """The gap check (a look at Kafka), retried, logged and counted like the incarnation check.

        Its failures (broker unreachable, a read that timed out) used to escape the
        delivery and crash the fetcher.
        """
        on_gap = self._on_gap
        assert on_gap is not None

        async def look() -> None:
            await on_gap(tp, stored, first)

        await self._retry("gap probe", look, 0)

    async def load_positions(self, tps: Sequence[TP]) -> None:
        """Read stored positions (retried like a write: the store may be down)."""
        found = Ledgers({}, {})

        async def load() -> None:
            nonlocal found
            found = await self.sink.ledgers(tps)

        await self._retry("offsets read", load, 0)
        stored = found.positions
        if self.marked:
            for tp, cut in found.pending.items():
                # The partition's log first: a topic deleted and recreated holds other records at
                # the intent's offsets, and a redo would count them (and store the new log's
                # fingerprint, so the check after it would pass). Diverged, it is held back and
                # the operator's `positions reset` drops the intent.
                if not await self._same_log(tp):
                    continue
                await self._redo(tp, cut)
                stored[tp] = cut.end
        self.positions.load(stored)
        self._fresh.update(stored)
        log.info(
            "%s positions from MongoDB: %s", self.stream, {f"{t}[{p}]": n for (t, p), n in stored.items()}
        )

    async def _redo(self, tp: TP, cut: Pending) -> None:
        """Write again, alone and with its sequence, a partition's range whose flush was cut short.

        The flush recorded its intent (``[start, end)``, sequence, flush id) and died, or
        lost its partitions, before moving the ledger: some of its documents may hold its
        marks, others not. The range is read again outside the group, aggregated alone and
        written under the same flush id: documents that have it answer "duplicate key",
        the others get it, and the ledger moves to ``end`` (docs/exactly-once.md).
        """
        if self._read_range is None:
            raise RuntimeError(f"{tp[0]}[{tp[1]}]: a flush was cut short and this flusher cannot read ranges")
        reader = self._read_range
        epoch = self._epoch
        records: list[tuple[int, bytes | None, int]] = []

        async def read() -> None:
            records[:] = await reader(tp, cut.start, cut.end)

        await self._retry(f"re-read of {tp[0]}[{tp[1]}] {cut.start}..{cut.end}", read, 0)
        batch = new_batch(self._factory, True, self.clock)
        if cut.decided_at is not None:  # an intent that recorded its decisions
            batch.decided_at = cut.decided_at  # decide as the flush did (pipeline.core.clock)
            batch.assumed[tp] = cut.decisions
        for offset, value, ts in records:
            batch.ingest_message(tp, offset, self._lines(value), None, cut.start, ts)
        log.warning(
            "%s[%d]: flush %s was cut short; writing its range %s..%s again (%d events, sequence %d)",
            *tp,
            cut.flush,
            cut.start,
            cut.end,
            batch.events,
            cut.seq,
        )
        if self._epoch != epoch:
            return  # abandoned meanwhile (a rebalance's bound): the partition's next owner redoes it
        self.stats.redone += 1
        await self._flush(batch, redo=(tp, cut))

    async def recheck(self, tp: TP) -> bool:
        """The incarnation check again, for a partition that stopped moving (the guard's watch)."""
        return await self._same_log(tp)

    async def _same_log(self, tp: TP) -> bool:
        """Check ``tp`` against its ledger; a diverged partition is held back and reported."""
        if self._check_incarnation is None or tp in self.diverged:
            return tp not in self.diverged
        check = self._check_incarnation
        verdicts: list[Verdict] = []

        async def run() -> None:
            verdicts.append(await check(tp))

        await self._retry("incarnation check", run, 0)
        verdict = verdicts[-1]
        if verdict.outcome == "diverged":
            self.diverged[tp] = verdict.reason
            log.error(
                "%s[%d]: %s. Nothing of this partition is counted until an operator decides with "
                "`preagg positions reset --topic %s --partition %d --to earliest|latest|OFFSET`.",
                *tp,
                verdict.reason,
                *tp,
            )
            if self._on_diverged is not None:
                await self._on_diverged(tp, verdict)
            return False
        if verdict.outcome == "unverifiable":
            log.warning("%s[%d]: cannot check the partition against its ledger: %s", *tp, verdict.reason)
        return True

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
        self.batch.ingest_message(tp, offset, self._lines(value), ack, start, ts)

    @staticmethod
    def _lines(value: bytes | None) -> list[bytes]:
        """The events of one message: one, or many packed (pipeline.core.envelope)."""
        if not value:
            return []
        if b"\n" in value:
            return list(unpack(value))
        return [value] if value.strip() else []  # one event: plain clients and log shippers

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

    def forget_positions(self, tps: Sequence[TP]) -> None:
        """After a rebalance: drop cached positions of partitions with nothing pending."""
        pending = set(self.batch.offsets).union(*(b.offsets for b in self.sealed))
        dropped = [tp for tp in tps if tp not in pending]
        self.positions.forget(dropped)
        self._fresh.difference_update(dropped)
        for tp in dropped:  # checked again when it is assigned again
            self.diverged.pop(tp, None)

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
        dropped = self.uncommitted_events()
        task = self._flush_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.sealed.clear()
        self.in_flight = None
        self.batch = new_batch(self._factory, self.marked, self.clock)
        self.positions.forget(self.positions.assigned())
        self._fresh.clear()
        self.consumed.clear()
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
            try:
                await self._flush_sealed()
            finally:
                self.stats.flush_started_at = None

    async def _flush_sealed(self) -> None:
        """Commit the sealed batches in order (the lock is held)."""
        todo = len(self.sealed)
        while todo > 0 and self.sealed:
            head = self.sealed.popleft()
            self.in_flight = head
            try:
                halves = await self._flush(head)
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

    async def _flush(
        self, batch: PendingBatch[A], redo: tuple[TP, Pending] | None = None
    ) -> tuple[PendingBatch[A], ...] | None:
        """Commit one batch and ack it; or return its two halves when it must be split (or the one
        batch that dead-letters an unwritable message).

        ``redo``: the batch is a cut-short flush's range read again (its flush id, its end).
        """
        started = time.monotonic()
        rejected = batch.rejected_by_reason()
        if self._before_plan is not None:
            step = self._before_plan
            for aggregate in batch.aggregates():

                async def before(a: A = aggregate) -> None:
                    await step(a)

                await self._retry(self._before_plan_label, before, batch.events)
        plan = self._plan(batch)
        docs = len(plan)
        fences = batch.fences(docs)
        if redo is not None:  # the intent's range exactly, even if records of it are gone
            rtp, cut = redo
            base = next((f for f in fences if (f.topic, f.partition) == rtp), Fence(*rtp, cut.start, cut.end))
            fences = [replace(base, expected=cut.start, next=cut.end)]
        rss = rss_bytes()
        fences = [replace(f, rss=rss) for f in fences]
        plan = split_wide(plan, self.max_fields_per_update)
        if batch.dead and not batch.dead_sent:
            await self._retry("dead-letter send", lambda: self._send_dead(batch.dead), batch.events)
            batch.dead_sent = True
            self._log_dead(batch.dead)
        result = Committed()
        commit_seconds = 0.0
        if fences:
            flush_id = redo[1].flush if redo is not None else uuid.uuid4().hex

            async def commit() -> None:
                nonlocal result, commit_seconds
                self._fault("before-commit")
                token = self.stream if self.contended() else None
                if token is not None and time.monotonic() - self._token_released < TOKEN_HANDOFF:
                    await asyncio.sleep(random.uniform(TOKEN_HANDOFF / 2, TOKEN_HANDOFF))
                self.stats.token_commits += token is not None
                began = time.monotonic()
                result = await self.sink.commit(plan, fences, flush_id, token, marked=self.marked)
                commit_seconds = time.monotonic() - began
                if token is not None:
                    self._token_released = time.monotonic()

            try:
                await self._retry(
                    "MongoDB commit",
                    commit,
                    batch.events,
                    give_up=lambda e: self._give_up(e, batch, docs),
                    tps=[(f.topic, f.partition) for f in fences],
                )
            except FenceConflict as conflict:
                self._on_fenced(conflict)
                raise
            except Exception as exc:  # _give_up chose to split: too large, too slow or unwritable
                if not (outcome_unknown(exc) and await self._committed_after_all(fences, flush_id, batch)):
                    return self._split(batch, docs, exc)
                result = Committed(already=True)
            self._count_marks(result, flush_id)
            if result.already:
                self.stats.replayed_commits += 1
                log.warning(
                    "flush %s had committed before its acknowledgement was lost; not rewritten", flush_id
                )
            self._fault("after-commit")
            self.bound.committed(docs, result.bytes, commit_seconds)
        if redo is None:  # a range read again has no Kafka messages to ack
            await self._ack(batch.acks)
        self._account(batch, rejected, docs, result.bytes, commit_seconds, time.monotonic() - started)
        if self._after_commit is not None:
            for aggregate in batch.aggregates():
                self._after_commit(aggregate)
        return None

    async def _committed_after_all(
        self, fences: Sequence[Fence], flush_id: str, batch: PendingBatch[A]
    ) -> bool:
        """After a commit failed in a way that may have applied it: did it? (the ledgers say)

        Splitting a batch that did commit would give its halves new flush ids whose
        fences fail (the worker would exit 75 and restart for nothing); resending it as
        it was is what the split avoids. So the ledgers are read first (retried while
        the store does not answer; a fence conflict goes up as usual).
        """
        found = False

        async def read() -> None:
            nonlocal found
            found = await self.sink.outcome(fences, flush_id)

        try:
            await self._retry("MongoDB commit outcome", read, batch.events)
        except FenceConflict as conflict:
            self._on_fenced(conflict)
            raise
        self.stats.unknown_outcomes += 1
        if found:
            log.warning(
                "%s: flush %s failed to answer but had committed; not split, not rewritten",
                self.stream,
                flush_id,
            )
        return found

    def contended(self) -> bool:
        """True while commits take the commit token (a write conflict in the last CONTENDED_SECONDS)."""
        return time.monotonic() < self._contended_until

    def _plan(self, batch: PendingBatch[A]) -> list[DocUpdate]:
        """The batch's document updates; with idempotent writes, each knows its source partitions."""
        if batch.by_tp is None:
            return batch.aggregate.plan()
        plan: list[DocUpdate] = []
        for tp, aggregate in batch.by_tp.items():
            # Optional hooks of a kind's aggregator: decide as the flush being redone did, and
            # say what this plan decided from the worker's own state (recorded with the intent).
            assume = getattr(aggregate, "assume", None)
            if tp in batch.assumed and assume is not None:
                assume(batch.assumed[tp])
            for u in aggregate.plan():
                u.sources = (tp,)
                plan.append(u)
            decided = getattr(aggregate, "decisions", None)
            made = decided() if decided is not None else None
            if made:
                batch.decisions[tp] = made
            else:
                batch.decisions.pop(tp, None)
        return merge_sources(plan, self.max_fields_per_update)

    def _give_up(self, exc: Exception, batch: PendingBatch[A], docs: int) -> bool:
        """After a failed commit: ``True`` to split the batch, ``False`` to retry it as it is."""
        self.stats.failed_commits += 1
        if not self.marked and permanent(exc) is not None:
            # The transaction aborted, nothing of it applied: halve it until the message whose
            # events cannot be written is alone, and dead-letter that message (_split).
            return True
        if self.marked or not shrinks(exc):
            return False  # idempotent writes: no transaction to shrink, the same flush is retried
        self.bound.failed(docs, exc.size if isinstance(exc, CommitTooLarge) else 0)
        if batch.splittable():
            return True
        self.stats.unsplittable += 1
        first = batch.messages[0] if batch.messages else None
        where = f"{first.tp[0]}[{first.tp[1]}]@{first.offset}" if first else "?"
        # Escalated like a permanent error after PERMANENT_ATTEMPTS (_retry): only an operator helps.
        self._unsplittable = f"one message ({where}) too large or too slow to commit ({type(exc).__name__})"
        log.error(
            "%s: a batch of one message (%s, %d events, %d documents) failed its commit as too large "
            "or too slow (%s: %s) and cannot be split; retrying it with backoff. Raise "
            "PREAGG_COMMIT_TIMEOUT / PREAGG_COMMIT_MAX_BYTES or the store's limits, or repack the message.",
            self.stream,
            where,
            batch.events,
            docs,
            type(exc).__name__,
            str(exc)[:200],
        )
        return False

    def _split(self, batch: PendingBatch[A], docs: int, exc: Exception) -> tuple[PendingBatch[A], ...]:
        reason = permanent(exc)
        if reason is not None and not batch.splittable():
            return (self._unwritable(batch, reason),)
        self.stats.splits += 1
        halves = batch.split(self._factory)
        log.warning(
            "%s commit of %d documents / %d messages failed as too large or too slow (%s: %s); split into "
            "batches of %d and %d messages, next batches sealed at %d documents",
            self.stream,
            docs,
            len(batch.messages),
            type(exc).__name__,
            str(exc)[:200],
            len(halves[0].messages),
            len(halves[1].messages),
            self.bound.docs_limit,
        )
        return halves

    def _log_dead(self, dead: list[DeadLetter]) -> None:
        for d in dead[:5]:
            log.warning(
                "rejected %s event at %s[%d]@%d line %d: %s",
                self.stream,
                d.topic,
                d.partition,
                d.offset,
                d.line,
                d.rejection.detail,
            )

    def _account(
        self,
        batch: PendingBatch[A],
        rejected: dict[str, int],
        docs: int,
        size: int,
        commit_seconds: float,
        took: float,
    ) -> None:
        s = self.stats
        s.commit_bytes += size
        s.events += batch.events
        s.skipped += batch.skipped
        for reason, n in rejected.items():
            s.rejected[reason] = s.rejected.get(reason, 0) + n
        s.flushes += 1
        s.docs += docs
        s.last_flush_seconds = took
        s.last_flush_at = time.time()
        s.observe(took)
        each_flush_log.info(
            "flushed %s: %d events, %d rejected, %d replayed skipped, %d docs, %d bytes in %.3fs "
            "(commit %.3fs; offsets %s)",
            self.stream,
            batch.events,
            sum(rejected.values()),
            batch.skipped,
            docs,
            size,
            took,
            commit_seconds,
            {f"{t}[{p}]": r for (t, p), r in batch.offsets.items()},
        )

    def _count_marks(self, result: Committed, flush_id: str) -> None:
        """Meter (and log) the upserts an idempotent flush found applied, sent again, or split."""
        s = self.stats
        s.marks_applied += result.applied
        s.inserts_raced += result.raced
        s.shares_split += result.split
        if result.raced or result.split:
            log.info(
                "flush %s: %d upserts met another writer's insert and were sent again, %d merged upserts "
                "were sent again per partition, %d were already applied",
                flush_id,
                result.raced,
                result.split,
                result.applied,
            )

    async def _escalate(self, tps: Sequence[TP], reason: str) -> None:
        """A write failed the same permanent way :data:`PERMANENT_ATTEMPTS` times: say so everywhere."""
        self.stuck = reason
        self.stats.permanent_errors += 1
        where = ", ".join(f"{t}[{p}]" for t, p in tps)
        log.error(
            "%s: a flush of %s fails for good: %s. Retrying stops helping: /health/live fails and "
            "`preagg status` shows it until the document is fixed (or removed); the flush then goes "
            "through by itself (docs/operations.md, 'A flush the store refuses').",
            self.stream,
            where,
            reason,
        )
        if self._on_stuck is not None:
            with contextlib.suppress(Exception):  # best effort: the store may refuse this too
                await self._on_stuck(tps, f"{self.stream}: {reason}")

    async def _unstick(self, tps: Sequence[TP]) -> None:
        log.warning("%s: the flush that failed for good (%s) went through", self.stream, self.stuck)
        self.stuck = None
        self._permanent_in_a_row = 0
        if self._on_stuck is not None:
            with contextlib.suppress(Exception):
                await self._on_stuck(tps, None)

    def _unwritable(self, batch: PendingBatch[A], reason: str) -> PendingBatch[A]:
        """The batch of one message the store refuses for good, as a batch that dead-letters its events.

        Transactions only: the refused transaction applied nothing, so the message's events
        can be refused as a whole (reason ``unwritable``, the store's error as the detail)
        and the partition moves on; ``deadletters replay`` sends them again once the
        document is fixed.
        """
        out = new_batch(self._factory, self.marked, self.clock)
        out.decided_at = batch.decided_at
        for m in batch.messages:
            if m.skipped:
                out.skip(m.ack)
            else:
                out.refuse_message(m, "unwritable", reason, batch.dead)
        self.stats.unwritable += out.events
        log.error(
            "%s: the store refuses the writes of one message for good (%s); its %d events are "
            "dead-lettered as 'unwritable' and the partition goes on. Fix the document, then "
            "`preagg deadletters replay --reason unwritable`.",
            self.stream,
            reason,
            out.events,
        )
        return out

    async def _retry(
        self,
        what: str,
        op: Callable[[], Awaitable[object]],
        events: int,
        give_up: Callable[[Exception], bool] | None = None,
        tps: Sequence[TP] = (),
    ) -> None:
        """Run ``op`` until it succeeds, logging and counting each failure, backing off.

        ``give_up`` may end the loop by re-raising a failure (the commit splits its batch).
        A permanent write error (:func:`~pipeline.store.errors.permanent`) met
        :data:`PERMANENT_ATTEMPTS` times in a row is escalated (:meth:`_escalate`).
        """
        delay = min(0.5, self.max_backoff)
        while True:
            try:
                await op()
                if tps and self.stuck is not None:
                    await self._unstick(tps)
                return
            except (asyncio.CancelledError, FenceConflict):
                raise
            except Exception as exc:  # any store/broker failure: keep the batch, back off
                if give_up is not None and give_up(exc):
                    raise
                reason = (permanent(exc) or self._unsplittable) if tps else None
                self._unsplittable = None
                self._permanent_in_a_row = self._permanent_in_a_row + 1 if reason else 0
                if reason is not None and self._permanent_in_a_row == PERMANENT_ATTEMPTS:
                    await self._escalate(tps, reason)
                self.stats.retries += 1
                # Jittered: workers whose commits conflicted must not retry in step and meet again.
                pause = random.uniform(delay / 2, delay)
                if is_write_conflict(exc):
                    # Two workers write one document (keyless streams): from now on commits take
                    # the token first, so a conflict costs one statement and is retried soon.
                    # (Retrying full-size conflicts sooner was measured to make them worse.)
                    self.stats.write_conflicts += 1
                    if not self.contended():
                        log.warning(
                            "%s: write conflicts with another worker's commits on the same documents; "
                            "commits take the stream's commit token for the next %.0fs",
                            self.stream,
                            CONTENDED_SECONDS,
                        )
                    self._contended_until = time.monotonic() + CONTENDED_SECONDS
                    pause = random.uniform(0.05, min(delay, CONFLICT_MAX_PAUSE))
                log.warning(
                    "%s failed (%s: %s); %d events held unacked, retrying in %.1fs",
                    what,
                    type(exc).__name__,
                    str(exc)[:200],
                    events,
                    pause,
                )
                await asyncio.sleep(pause)
                delay = min(delay * 2, self.max_backoff)


def is_write_conflict(exc: BaseException) -> bool:
    """A transaction aborted because another one wrote the same document (MongoDB code 112)."""
    # Not the TransientTransactionError label: network errors inside a transaction carry it too.
    return getattr(exc, "code", None) == WRITE_CONFLICT


def exit_to_resume(reason: str) -> None:
    """End the process at once (after leaving the group) so that its restart resumes from MongoDB."""
    exit_now(EXIT_FENCED, f"{reason}; exiting (status {EXIT_FENCED}) to resume from MongoDB's positions.")


def exit_fenced(conflict: FenceConflict) -> None:
    """Default reaction to a failed fence: log, then end the process at once.

    ``os._exit`` skips Faust's shutdown on purpose: a clean stop would ack and commit
    the dropped batch's offsets. The supervisor (compose ``restart``, systemd, the
    chaos driver) restarts the worker; it rejoins the group and resumes from
    MongoDB's offsets.
    """
    exit_now(EXIT_FENCED, f"{conflict}; another worker owns these partitions now. Dropped the batch.")
