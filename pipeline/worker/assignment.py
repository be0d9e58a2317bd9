"""What a worker does when its group gives it partitions: say so, record it, check them.

One line a rebalance names what the worker holds now (Faust's assignment tables are out
of the log); the member's partitions are recorded for ``preagg status`` (brokers may not
say), positions are reloaded lazily (another worker may have moved them), and with
exactly-once each new partition's ledger is compared with the log Kafka serves. The
store and the broker are asked after the rebalance's callback, never inside it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import faust

from pipeline.worker.flusher import Flusher
from pipeline.worker.guard import LedgerGuard
from pipeline.worker.joint import JointAck
from pipeline.worker.rebalance import last_join
from pipeline.worker.retrying import retried

log = logging.getLogger("preagg.worker")

#: Records what a member holds (the store's ``record_assignment``): best effort.
Record = Callable[[str, list[str]], Awaitable[None]]


class Assignments:
    """The worker's reaction to each assignment; :attr:`joined` once it had one (maybe empty)."""

    def __init__(
        self,
        app: faust.App,
        flushers: Sequence[Flusher[Any]],
        guard: LedgerGuard,
        record: Record,
        check: bool,
        settled: set[tuple[str, int]],
    ) -> None:
        self.app, self.flushers, self.guard, self.record, self.check = app, flushers, guard, record, check
        self.settled = settled
        #: In the group with an assignment: ``/health/ready`` may say yes.
        self.joined = asyncio.Event()
        #: The joint acks of kinds read by two flushers: told which partitions are still held.
        self.joints: list[JointAck] = []
        #: Streams told which partitions of their topic are still held (:attr:`Stream.keep`).
        self.keepers: list[tuple[str, Callable[[set[int]], None]]] = []
        # Kept while running, so that they are not collected.
        self._tasks: list[asyncio.Future[None]] = []

    def install(self) -> None:
        self.app.on_partitions_assigned.connect(cast(Any, self.on_assigned))

    async def on_assigned(self, sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        held = sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned)
        log.info("assigned %d partition(s): %s", len(held), ", ".join(held) or "none")
        self.joined.set()
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.ensure_future(self.record(last_join(self.app)[0], held)))
        self.settled.clear()  # partitions found at their end (backlog.behind): ask the new ones
        kept = {(tp.topic, tp.partition) for tp in assigned}
        for f in self.flushers:
            f.forget_positions(f.positions.assigned(), kept)
        for joint in self.joints:
            joint.keep((tp.topic, tp.partition) for tp in assigned)
        for topic, keep in self.keepers:
            keep({tp.partition for tp in assigned if tp.topic == topic})
        if self.check and assigned:
            tps = [(tp.topic, tp.partition) for tp in assigned]
            self._tasks.append(asyncio.ensure_future(self.check_ledgers(tps)))

    async def check_ledgers(self, tps: list[tuple[str, int]]) -> None:
        # The store or the broker away: tried again, then left to the gap check at a record.
        await retried(
            lambda: self.guard.at_assignment(tps),
            "cannot compare the assigned partitions' ledgers with Kafka now",
            Exception,
            attempts=6,
        )
