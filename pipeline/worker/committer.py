"""One batch committed: dead letters first, then its updates with its fences, then its acks.

The order (docs/exactly-once.md): send the batch's dead letters and wait for the broker;
commit its planned upserts *and its source offsets* through the :class:`~pipeline.core.commit.Sink`
(a transaction that first checks the ledgers still hold the batch's start positions, or
idempotent marked writes); only then ack its Kafka messages so that Faust commits their
offsets. Every call is retried (:mod:`pipeline.worker.retry`); a commit that fails because it
is too large or too slow, or that the store refuses for good, is split in two contiguous
halves (down to the one message that is dead-lettered as ``unwritable``) instead of being
sent again as it was. A range a flush cut short is read again and written under the same
flush id (:meth:`BatchCommitter.redo`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic

from pipeline.core.clock import DecisionClock
from pipeline.core.collector import paused, thaw
from pipeline.core.commit import TP, Committed, Fence, FenceConflict, Forward, Pending, Sink
from pipeline.core.envelope import events_of
from pipeline.core.updates import DocUpdate, merge_sources, split_wide
from pipeline.worker.accounting import Accounting
from pipeline.worker.batch import A, PendingBatch, new_batch
from pipeline.worker.bounds import CommitBound
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.faults import FLUSHING
from pipeline.worker.memory import rss_bytes
from pipeline.worker.policy import FlushHooks, FlushPolicy
from pipeline.worker.retry import Retrier

log = logging.getLogger("preagg.flush")

SendDead = Callable[[Sequence[DeadLetter]], Awaitable[None]]
#: Acks the handles of committed messages, in the order they were received.
Ack = Callable[[Sequence[object]], Awaitable[object]]
#: Reads a partition's records ``[start, end)`` outside the group (``start`` ``None``: from the
#: log's beginning): ``(offset, value, timestamp ms)`` each. The worker's is a group-less consumer.
ReadRange = Callable[[TP, int | None, int], Awaitable[list[tuple[int, bytes | None, int]]]]


async def read_retried(
    retry: Retrier, reader: ReadRange, tp: TP, start: int | None, end: int, why: str = ""
) -> list[tuple[int, bytes | None, int]]:
    """A partition's records ``[start, end)`` read outside the group, retried (logged, metered)."""
    records: list[tuple[int, bytes | None, int]] = []

    async def read() -> None:
        records[:] = await reader(tp, start, end)

    await retry.run(f"re-read of {tp[0]}[{tp[1]}] {start}..{end}{why}", read, 0)
    return records


@dataclass(frozen=True)
class StreamPorts(Generic[A]):
    """What one stream's batches are made with, written to and read again from (the flusher's
    arguments, handed on to its committer as one value)."""

    stream: str
    factory: Callable[[], A]
    sink: Sink
    #: ``None``: another reader of the same records refuses them alike, and sends and logs them
    #: (a family of documents flushed apart); this one neither.
    send_dead: SendDead | None
    ack: Ack
    read_range: ReadRange | None = None
    clock: DecisionClock | None = None
    #: A message's records: its events (one, or many packed), or the whole message.
    events: Callable[[bytes | None], list[bytes]] = events_of


class BatchCommitter(Generic[A]):
    """Commits one stream's batches, one at a time (the flusher serialises them)."""

    def __init__(
        self,
        ports: StreamPorts[A],
        policy: FlushPolicy,
        bound: CommitBound,
        hooks: FlushHooks,
        retrier: Retrier,
        accounting: Accounting,
        marked: bool,
        epoch: Callable[[], int],
    ) -> None:
        self.stream = ports.stream
        self.factory = ports.factory
        self.sink = ports.sink
        self.send_dead = ports.send_dead
        self.ack = ports.ack
        self.read_range = ports.read_range
        self.clock = ports.clock
        self.events = ports.events
        self.policy = policy
        self.bound = bound
        self.hooks = hooks
        self.retry = retrier
        self.accounting = accounting
        self.stats = accounting.stats
        self.marked = marked
        #: The flusher's epoch (bumped by an abandon): a redo read before it is not written.
        self.epoch = epoch

    async def commit(
        self, batch: PendingBatch[A], redo: tuple[TP, Pending] | None = None
    ) -> tuple[PendingBatch[A], ...] | None:
        """Commit one batch and ack it; or return its two halves when it must be split (or the one
        batch that dead-letters an unwritable message).

        ``redo``: the batch is a cut-short flush's range read again (its flush id, its end).
        """
        try:
            return await self._commit(batch, redo)
        finally:
            thaw()  # what the plan froze (pipeline/core/collector.py) is freed or old by now

    async def _commit(
        self, batch: PendingBatch[A], redo: tuple[TP, Pending] | None
    ) -> tuple[PendingBatch[A], ...] | None:
        started = time.monotonic()
        FLUSHING.set(self.stream)  # for a fault injected in one stream's flushes only
        rejected = batch.rejected_by_reason()
        hooks = self.hooks
        await self._before_plan(batch, redo)
        with paused():  # the plan's objects would start full collections of the whole heap
            plan = self.plan(batch)
            docs = len(plan)
            fences = batch.fences(docs)
            if redo is not None:  # the intent's range exactly, even if records of it are gone
                rtp, cut = redo
                base = next(
                    (f for f in fences if (f.topic, f.partition) == rtp), Fence(*rtp, cut.start, cut.end)
                )
                fences = [replace(base, expected=cut.start, next=cut.end)]
            rss = rss_bytes()
            fences = [replace(f, rss=rss) for f in fences]
            plan = split_wide(plan, self.policy.max_fields_per_update)
        forward = self._forward(batch)
        await self._send_dead(batch)
        result = Committed()
        commit_seconds = 0.0
        if fences:
            flush_id = redo[1].flush if redo is not None else uuid.uuid4().hex

            async def commit() -> None:
                nonlocal result, commit_seconds
                hooks.fault("before-commit")
                token = await self.retry.token()
                began = time.monotonic()
                result = await self.sink.commit(
                    plan, fences, flush_id, token, marked=self.marked, forward=forward
                )
                commit_seconds = time.monotonic() - began
                self.retry.released(token)

            try:
                await self.retry.run(
                    "MongoDB commit" if forward is None else "forwarded sends and MongoDB commit",
                    commit,
                    batch.events,
                    give_up=lambda e: self.give_up(e, batch, docs),
                    tps=[(f.topic, f.partition) for f in fences],
                )
            except FenceConflict as conflict:
                hooks.on_fenced(conflict)
                raise
            except Exception as exc:  # give_up chose to split: too large, too slow or unwritable
                unknown = self.sink.failure(exc).outcome_unknown
                if not (unknown and await self.committed_after_all(fences, flush_id, batch)):
                    return self.split(batch, docs, exc)
                result = Committed(already=True)
            self.accounting.marks(result, flush_id)
            if result.already:
                self.stats.replayed_commits += 1
                log.warning(
                    "flush %s had committed before its acknowledgement was lost; not rewritten", flush_id
                )
            hooks.fault("after-commit")
            self.bound.committed(docs, result.bytes, commit_seconds)
        if redo is None:  # a range read again has no Kafka messages to ack
            await self.ack(batch.acks)
        self.accounting.flushed(
            batch, rejected, docs, result.bytes, commit_seconds, time.monotonic() - started
        )
        if hooks.after_commit is not None:
            for aggregate in batch.aggregates():
                hooks.after_commit(aggregate)
        return None

    async def _before_plan(self, batch: PendingBatch[A], redo: tuple[TP, Pending] | None) -> None:
        """Each aggregate told its range (``ranged``) and its kind's step before planning (retried)."""
        _ranged(batch, redo)
        step = self.hooks.before_plan
        if step is None:
            return
        for aggregate in batch.aggregates():

            async def before(a: A = aggregate) -> None:
                await step(a)

            # With its partitions: stored state it cannot go on from is escalated on their ledgers.
            await self.retry.run(self.hooks.before_plan_label, before, batch.events, tps=list(batch.offsets))

    async def redo(self, tp: TP, cut: Pending) -> None:
        """Write again, alone and with its sequence, a partition's range whose flush was cut short.

        The flush recorded its intent (``[start, end)``, sequence, flush id) and died, or
        lost its partitions, before moving the ledger: some of its documents may hold its
        marks, others not. The range is read again outside the group, aggregated alone and
        written under the same flush id: documents that have it answer "duplicate key",
        the others get it, and the ledger moves to ``end`` (docs/exactly-once.md).
        """
        if self.read_range is None:
            raise RuntimeError(f"{tp[0]}[{tp[1]}]: a flush was cut short and this flusher cannot read ranges")
        epoch = self.epoch()
        records = await read_retried(self.retry, self.read_range, tp, cut.start, cut.end)
        batch = new_batch(self.factory, True, self.clock)
        if cut.decided_at is not None:  # an intent that recorded its decisions
            batch.decided_at = cut.decided_at  # decide as the flush did (pipeline.core.clock)
            batch.assumed[tp] = cut.decisions
        for offset, value, ts in records:
            batch.ingest_message(tp, offset, self.events(value), None, cut.start, ts)
        log.warning(
            "%s[%d]: flush %s was cut short; writing its range %s..%s again (%d events, sequence %d)",
            *tp,
            cut.flush,
            cut.start,
            cut.end,
            batch.events,
            cut.seq,
        )
        if self.epoch() != epoch:
            return  # abandoned meanwhile (a rebalance's bound): the partition's next owner redoes it
        self.stats.redone += 1
        await self.commit(batch, redo=(tp, cut))

    async def committed_after_all(
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
            await self.retry.run("MongoDB commit outcome", read, batch.events)
        except FenceConflict as conflict:
            self.hooks.on_fenced(conflict)
            raise
        self.stats.unknown_outcomes += 1
        if found:
            log.warning(
                "%s: flush %s failed to answer but had committed; not split, not rewritten",
                self.stream,
                flush_id,
            )
        return found

    def _forward(self, batch: PendingBatch[A]) -> Forward | None:
        """What the batch's flush forwards once its intent is recorded (``None``: nothing)."""
        forward_of = self.hooks.forward_of
        if forward_of is None or not batch.by_tp:
            return None
        ends = {tp[1]: batch.offsets[tp][1] + 1 for tp in batch.by_tp}
        return forward_of({tp[1]: a for tp, a in batch.by_tp.items()}, ends)

    async def _send_dead(self, batch: PendingBatch[A]) -> None:
        """The batch's dead letters, sent (retried) and logged once, before its store commit."""
        send = self.send_dead
        if batch.dead and not batch.dead_sent:
            if send is not None:
                await self.retry.run("dead-letter send", lambda: send(batch.dead), batch.events)
                self.accounting.dead(batch.dead)
            batch.dead_sent = True

    def plan(self, batch: PendingBatch[A]) -> list[DocUpdate]:
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
        return merge_sources(plan, self.policy.max_fields_per_update)

    def give_up(self, exc: Exception, batch: PendingBatch[A], docs: int) -> bool:
        """After a failed commit: ``True`` to split the batch, ``False`` to retry it as it is."""
        self.stats.failed_commits += 1
        failure = self.sink.failure(exc)
        if not self.marked and failure.permanent is not None:
            # The transaction aborted, nothing of it applied: halve it until the message whose
            # events cannot be written is alone, and dead-letter that message (split).
            return True
        if self.marked or not failure.shrinks:
            return False  # idempotent writes: no transaction to shrink, the same flush is retried
        self.bound.failed(docs, failure.too_large)
        if batch.splittable():
            return True
        self.stats.unsplittable += 1
        first = batch.messages[0] if batch.messages else None
        where = f"{first.tp[0]}[{first.tp[1]}]@{first.offset}" if first else "?"
        # Escalated like a permanent error after PERMANENT_ATTEMPTS (Retrier.run): only an operator helps.
        self.retry.unsplittable = (
            f"one message ({where}) too large or too slow to commit ({type(exc).__name__})"
        )
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

    def split(self, batch: PendingBatch[A], docs: int, exc: Exception) -> tuple[PendingBatch[A], ...]:
        """The batch in two contiguous halves (or, for one message the store refuses for good,
        the batch that dead-letters it)."""
        reason = self.sink.failure(exc).permanent
        if reason is not None and not batch.splittable():
            return (self.unwritable(batch, reason),)
        self.stats.splits += 1
        halves = batch.split(self.factory)
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

    def unwritable(self, batch: PendingBatch[A], reason: str) -> PendingBatch[A]:
        """The batch of one message the store refuses for good, as a batch that dead-letters its events.

        Transactions only: the refused transaction applied nothing, so the message's events
        can be refused as a whole (reason ``unwritable``, the store's error as the detail)
        and the partition moves on; ``deadletters replay`` sends them again once the
        document is fixed.
        """
        out = new_batch(self.factory, self.marked, self.clock)
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


def _ranged(batch: PendingBatch[A], redo: tuple[TP, Pending] | None) -> None:
    """Tell each aggregate that asks (the optional ``ranged(start, end)``: a stage keeping state
    between flushes) the range it is planned for: its ledger's position and where this flush
    moves it (a redo's, the intent's)."""
    for tp, aggregate in (batch.by_tp or {}).items():
        ranged = getattr(aggregate, "ranged", None)
        if ranged is None:
            continue
        if redo is not None and redo[0] == tp:
            ranged(None if redo[1].first else redo[1].start, redo[1].end)
        else:
            ranged(batch.start.get(tp), batch.offsets[tp][1] + 1)
