"""The visits stage: the forwarded hits of each partition of the visits topic made into visits,
closed ones counted where charts read them, the open ones saved with every flush.

Each flush of a partition reads on from the state its ledger stands at, and writes, under the
partition's marks (docs/exactly-once.md): first the counts of the visits it closed and its open
visits, saved in the slot of parts the state does not use; then the head that names the new
position, slot and parts. So the stored head is the state after the last flush whose counts
are all written, and a flush cut short is written again from the state before it:

- the head still at the flush's start (cut before its head): the flush is planned again from
  it, and the counts its first attempt wrote meet their marks;
- the head at the flush's end (cut after it): every count was written, nothing is planned again;
- anywhere else: the state is not the ledger's (restored from another time, or the ledger
  reset without it). No count can be decided from it: refused (:class:`VisitStateError`),
  escalated on the partition's ledger, never guessed at.

The worker keeps each partition's state in memory between its flushes: a flush takes it, and
gives it back once committed; a flush that did not commit leaves none, so the next one reads
the stored state again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pymongo
from bson import Binary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.read_concern import ReadConcern

from pipeline.core.fields import FieldMode
from pipeline.core.rejection import Rejection
from pipeline.core.updates import DocUpdate
from pipeline.core.visit_hits import Packed, unpack
from pipeline.core.visit_state import PartitionVisits, Taken, VisitStateError, loaded
from pipeline.kinds.hits.layout import hits_fields, visit_pages_fields, visit_state_fields
from pipeline.kinds.hits.planning.inputs import Calendars
from pipeline.kinds.hits.visit_docs import visit_updates
from pipeline.store.reads import find_in

log = logging.getLogger("preagg.visits")


@dataclass
class VisitsAggregate:
    """One flush's forwarded messages of one partition (the stage's per-batch aggregator)."""

    stage: VisitStage
    partition: int = -1
    messages: list[Packed] = field(default_factory=list)
    hits: int = 0
    #: The range it is planned for (``ranged``): the ledger's position and where it moves.
    start: int | None = None
    end: int = 0
    #: The state it reads on from (set before its plan), and after its plan the state it leaves.
    state: PartitionVisits | None = None
    #: The stored head already stands at :attr:`end`: the flush was written, but for its ledger.
    already: bool = False
    taken: Taken = field(default_factory=Taken)
    closed: int = 0
    #: Of :attr:`closed`, those closed before their time by the bound on open visits.
    early: int = 0

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        self.partition = partition
        got = unpack(raw)
        if isinstance(got, Rejection):
            return got
        self.messages.append(got)
        self.hits += len(got.hits)
        return None

    def __len__(self) -> int:
        return self.hits

    def documents(self) -> int:
        return len(self.messages) + 1

    def ranged(self, start: int | None, end: int) -> None:
        self.start, self.end = start, end

    def plan(self) -> list[DocUpdate]:
        return self.stage.plan(self)


class VisitStage:
    """One worker's visits stage: the state of each partition it flushes, read and written."""

    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        mode: FieldMode,
        group: str,
        topic: str,
        timeout: float,
        grace: float,
        calendars: Calendars,
        deadline: float,
        max_open: int = 250_000,
    ) -> None:
        self.db, self.group, self.topic = db, group, topic
        # What decides whether a flush was written reads only what a majority holds: a head a
        # failover can still roll back is not written (MongoDB's manual, Read Concern "majority").
        self.durable = db.with_options(read_concern=ReadConcern("majority"))
        self.timeout, self.grace, self.calendars, self.deadline = timeout, grace, calendars, deadline
        self.fields, self.pages = hits_fields(mode), visit_pages_fields(mode)
        self.sf = visit_state_fields(mode)
        #: Each partition's state between its flushes (taken by a plan, given back once committed).
        self.states: dict[int, PartitionVisits] = {}
        self.closed = self.hits = self.copies = self.foreign = self.loads = self.late = self.early = 0
        #: Most visits a partition holds open (a flush closes the ones past it, oldest first).
        self.max_open = max_open

    def aggregate(self) -> VisitsAggregate:
        """A new flush's aggregator (the stream's factory)."""
        return VisitsAggregate(self)

    def head_id(self, partition: int) -> str:
        return f"{self.group}/{self.topic}/{partition}"

    def part_id(self, partition: int, slot: int, index: int) -> str:
        return f"{self.head_id(partition)}/{slot}/{index}"

    async def ready(self, agg: VisitsAggregate) -> None:
        """Give the flush the state its range starts from: the one in memory, else the stored one."""
        held = self.states.get(agg.partition)
        if held is not None and held.upto == agg.start:
            agg.state, agg.already = held, False
            return
        agg.state, agg.already = await self.load(agg.partition, agg.start, agg.end)
        self.loads += 1

    async def load(self, partition: int, start: int | None, end: int) -> tuple[PartitionVisits, bool]:
        """The stored state of ``partition`` for a flush of ``[start, end)``, and whether it already
        stands at ``end``; refused when it is at neither."""
        coll, sf = self.durable[self.sf.collection], self.sf
        where = f"{self.topic}[{partition}]"
        with pymongo.timeout(self.deadline):
            doc = await coll.find_one({"_id": self.head_id(partition)})
        if doc is None:
            if start is None:
                return PartitionVisits.empty(self.timeout, self.grace), False
            raise VisitStateError(
                f"{where}: no visits state stored, yet its ledger stands at {start}: "
                "the state was deleted or restored without it, so no visit can be decided"
            )
        head = doc.get(sf.state)
        upto = head.get("upto") if isinstance(head, dict) else None
        if not isinstance(head, dict) or upto not in (start, end) or (start is None and upto != end):
            raise VisitStateError(
                f"{where}: the stored visits state stands at {upto!r} and the ledger's flush covers "
                f"{start}..{end}: the state is not the ledger's (restored from another time?)"
            )
        count, slot = head.get("parts"), head.get("slot")
        if not isinstance(count, int) or slot not in (0, 1):
            raise VisitStateError(
                f"{where}: the stored visits state's head names parts={count!r} slot={slot!r}"
            )
        ids = [self.part_id(partition, int(slot), i) for i in range(count)]
        with pymongo.timeout(self.deadline):
            found = {d["_id"]: d async for d in find_in(coll, ids)}
        parts: list[bytes] = []
        for i in ids:
            d = found.get(i)
            if d is None or d.get(sf.upto) != upto or not isinstance(d.get(sf.data), bytes):
                raise VisitStateError(f"{where}: part {i} of the visits state at {upto} is missing or stale")
            parts.append(bytes(d[sf.data]))
        state = loaded(head, parts, self.timeout, self.grace)
        return state, upto == end and upto != start

    def plan(self, agg: VisitsAggregate) -> list[DocUpdate]:
        """The flush's writes: counts of the visits it closed and its open visits saved (written
        first), then the head that names them."""
        state = agg.state
        if state is None:
            raise RuntimeError(f"{self.topic}[{agg.partition}]: a visits flush planned without its state")
        self.states.pop(agg.partition, None)  # given back once committed
        if agg.already:
            return []
        closed = []
        agg.taken = Taken()  # planned again after a failed attempt: counted once
        for packed in agg.messages:
            closed.extend(state.take(packed, self.group, agg.taken))
        over = len(state.sessions) - self.max_open
        early = state.sessions.close_oldest(over) if over > 0 else []
        closed.extend(early)
        agg.closed, agg.early = len(closed), len(early)
        state.upto, state.slot = agg.end, 1 - state.slot
        updates = visit_updates(closed, self.calendars, self.fields, self.pages)
        parts = state.parts()
        sf = self.sf
        updates.extend(
            DocUpdate(
                sf.collection,
                self.part_id(agg.partition, state.slot, i),
                {},
                set={sf.upto: agg.end, sf.data: Binary(part)},
            )
            for i, part in enumerate(parts)
        )
        for u in updates:
            u.before = True
        head = state.head(agg.end, len(parts))
        return [*updates, DocUpdate(sf.collection, self.head_id(agg.partition), {}, set={sf.state: head})]

    def committed(self, agg: VisitsAggregate) -> None:
        """The flush is written: its state is the partition's until the next one."""
        if agg.state is not None:
            self.states[agg.partition] = agg.state
        t = agg.taken
        self.closed += agg.closed
        if agg.early:
            self.early += agg.early
            log.warning(
                "%s[%d]: %d visits closed before their time: the partition held more than %d open "
                "(PREAGG_HITS_VISITS_MAX_OPEN); a later hit of one starts another visit",
                self.topic,
                agg.partition,
                agg.early,
                self.max_open,
            )
        self.hits += t.hits
        self.copies += t.copies
        self.foreign += t.foreign
        if t.late:
            self.late += t.late
            log.warning(
                "%s[%d]: %d forwarded hits came after the visits stage stopped waiting for them "
                "(up to %.0f s behind its event time less the grace): a visit each would have joined "
                "may have closed, and it may count as a visit of its own; a grace "
                "(PREAGG_HITS_VISIT_GRACE) above the skew between the hits' partitions avoids it",
                self.topic,
                agg.partition,
                t.late,
                t.late_by,
            )

    def keep(self, held: set[int]) -> None:
        """Drop the states of partitions the worker no longer holds: their next owner reads them
        from the store, and one given back later is read again (its flushes moved it on)."""
        for partition in set(self.states) - held:
            del self.states[partition]

    def metrics(self) -> Iterable[Metric]:
        """The stage's figures: visits closed, hits taken, copies and other groups' messages
        skipped, states read from the store, visits open now."""
        counters = (
            ("preagg_visits_closed", "Visits closed and counted", self.closed),
            ("preagg_visit_hits", "Forwarded hits taken into visits", self.hits),
            ("preagg_visit_copies", "Forwarded messages skipped as copies of ones taken", self.copies),
            ("preagg_visit_foreign", "Forwarded messages of another consumer group, skipped", self.foreign),
            ("preagg_visit_state_loads", "Visits states read from the store", self.loads),
        )
        for name, about, n in counters:
            c = CounterMetricFamily(name, about)
            c.add_metric([], float(n))
            yield c
        # Named where it is made: an alert reads it (deploy/kubernetes/monitoring.yaml).
        late = CounterMetricFamily(
            "preagg_visit_late_hits", "Forwarded hits taken after their visit may have closed"
        )
        late.add_metric([], float(self.late))
        yield late
        early = CounterMetricFamily("preagg_visits_closed_early", "Visits closed early by the bound")
        early.add_metric([], float(self.early))
        yield early
        g = GaugeMetricFamily("preagg_visits_open", "Visits open in this worker's partitions")
        g.add_metric([], float(sum(len(s.sessions) for s in self.states.values())))
        yield g
