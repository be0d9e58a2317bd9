"""What a flusher knows of its partitions before it counts their messages.

Per partition: the position MongoDB's ledger holds (loaded lazily, retried like a write),
whether the log Kafka serves is the one the ledger describes (the incarnation check),
whether Kafka's first offset jumps past the ledger (the gap check), and which partitions
are held back as diverged. The checks themselves are the worker's
:class:`~pipeline.worker.guard.LedgerGuard`; the flusher sees them only through
:class:`PartitionChecks`, and the guard sees flushers only through :class:`Gated` (no
import either way between the two modules).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from pipeline.core.commit import TP, Ledgers, Pending, Sink
from pipeline.core.incarnation import Verdict
from pipeline.worker.cursors import Positions
from pipeline.worker.retry import Retrier

log = logging.getLogger("preagg.flush")

#: Writes again a partition's range whose flush was cut short (idempotent writes).
Redo = Callable[[TP, Pending], Awaitable[None]]


class PartitionChecks(Protocol):
    """The checks a flusher asks of the worker before counting a partition (the guard's)."""

    async def check(self, tp: TP) -> Verdict:
        """Is the partition Kafka serves the one its ledger describes?"""
        ...

    async def on_diverged(self, tp: TP, verdict: Verdict) -> None:
        """A partition diverged: record it where operators look."""
        ...

    async def on_gap(self, tp: TP, stored: int, first: int) -> None:
        """Kafka's first delivered offset is past the ledger's: decide (go on, or restart)."""
        ...


class Gated(Protocol):
    """What the guard's watch asks of a flusher: its held-back and consumed partitions, a recheck."""

    stream: str

    @property
    def diverged(self) -> dict[TP, str]: ...

    @property
    def consumed(self) -> dict[TP, int]: ...

    @property
    def positions(self) -> Positions: ...

    async def recheck(self, tp: TP) -> bool: ...


class PartitionGate:
    """Positions, checks and held-back partitions of one stream's flusher."""

    def __init__(self, sink: Sink, retrier: Retrier, checks: PartitionChecks | None, marked: bool) -> None:
        self.sink = sink
        self.retry = retrier
        self.checks = checks
        self.marked = marked
        self.positions = Positions()
        #: Partitions whose position was just loaded and whose first message is awaited.
        self.fresh: set[TP] = set()
        #: Next offset to consume per partition (what the worker has read, counted or not).
        self.consumed: dict[TP, int] = {}
        #: Partitions whose log is not the one their ledger describes: nothing of them is counted
        #: until an operator resets the ledger (``preagg positions reset``); reason per partition.
        self.diverged: dict[TP, str] = {}

    async def load_positions(self, stream: str, tps: Sequence[TP], redo: Redo) -> None:
        """Read stored positions (retried like a write: the store may be down); with idempotent
        writes, first write again any range a flush cut short (``redo``)."""
        found = Ledgers({}, {})

        async def load() -> None:
            nonlocal found
            found = await self.sink.ledgers(tps)

        await self.retry.run("offsets read", load, 0)
        stored = found.positions
        if self.marked:
            for tp, cut in found.pending.items():
                # The partition's log first: a topic deleted and recreated holds other records at
                # the intent's offsets, and a redo would count them (and store the new log's
                # fingerprint, so the check after it would pass). Diverged, it is held back and
                # the operator's `positions reset` drops the intent.
                if not await self.same_log(tp):
                    continue
                await redo(tp, cut)
                stored[tp] = cut.end
        self.positions.load(stored)
        self.fresh.update(stored)
        log.info("%s positions from MongoDB: %s", stream, {f"{t}[{p}]": n for (t, p), n in stored.items()})

    async def gap(self, tp: TP, stored: int, first: int) -> None:
        """The gap check (a look at Kafka), retried, logged and counted like the incarnation check.

        Its failures (broker unreachable, a read that timed out) used to escape the
        delivery and crash the fetcher.
        """
        checks = self.checks
        if checks is None:
            return

        async def look() -> None:
            await checks.on_gap(tp, stored, first)

        await self.retry.run("gap probe", look, 0)

    async def same_log(self, tp: TP) -> bool:
        """Check ``tp`` against its ledger; a diverged partition is held back and reported."""
        if self.checks is None or tp in self.diverged:
            return tp not in self.diverged
        checks = self.checks
        verdicts: list[Verdict] = []

        async def run() -> None:
            verdicts.append(await checks.check(tp))

        await self.retry.run("incarnation check", run, 0)
        verdict = verdicts[-1]
        if verdict.outcome == "diverged":
            self.diverged[tp] = verdict.reason
            if "preagg positions" in verdict.reason:  # the reason names its own way out
                log.error("held back: %s", verdict.reason)
            else:
                log.error(
                    "%s[%d]: %s. Nothing of this partition is counted until an operator decides with "
                    "`preagg positions reset --topic %s --partition %d --to earliest|latest|OFFSET`.",
                    *tp,
                    verdict.reason,
                    *tp,
                )
            await checks.on_diverged(tp, verdict)
            return False
        if verdict.outcome == "unverifiable":
            log.warning("%s[%d]: cannot check the partition against its ledger: %s", *tp, verdict.reason)
        return True

    def forget(self, dropped: Sequence[TP]) -> None:
        """Partitions this worker may no longer own: load and check them again when they come back."""
        self.positions.forget(dropped)
        self.fresh.difference_update(dropped)
        for tp in dropped:
            self.diverged.pop(tp, None)

    def clear(self) -> None:
        """Forget every partition (a rebalance's drain gave up: everything is read again)."""
        self.positions.forget(self.positions.assigned())
        self.fresh.clear()
        self.consumed.clear()
