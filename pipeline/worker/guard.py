"""The worker's guard of its ledgers against the log Kafka serves.

* **Incarnation** (:mod:`pipeline.core.incarnation`): before a partition is counted again,
  its ledger's fingerprint of the last counted record is compared with the record
  Kafka holds there. A partition that diverged (topic recreated, data lost) is held
  back: nothing counted, its consumption paused, the ledger marked ``diverged`` (so
  ``preagg status`` shows it), ``/health`` failing, a metric raised, until an operator
  runs ``preagg positions reset``; the guard then restarts the worker from the new ledger.
* **Gaps**: when Kafka first delivers an offset above the ledger's ``next``, the guard
  asks Kafka for the first record at or after ``next``. If it is the delivered one, the
  gap is Kafka's own (transaction markers, compaction) and counting goes on; if records
  exist in between, Kafka's committed offset is ahead of MongoDB's and the worker points
  it back and restarts. The old rule (any gap restarts) crash-looped on a gap Kafka made.
* **At assignment** the same comparison is made at once, from Kafka's committed offsets
  rather than from a delivered record: a partition whose ledger is behind them (a restored
  backup, a reset, an adopt) resumes from the ledger even on a quiet topic, where no record
  would ever arrive to show the gap.
* **Data lost before it was counted**: Kafka's first offset past a ledger's ``next``
  (retention, deletion) is a WARNING with the offsets lost, ``preagg_offsets_lost_total`` and
  a mark on the ledger that ``preagg status`` shows as a PROBLEM until an operator
  acknowledges it (``preagg positions acknowledge``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence

import faust
from faust.types import TP
from prometheus_client.core import CounterMetricFamily, Metric

from pipeline.core.commit import LedgerPort
from pipeline.core.families import FamilySink
from pipeline.core.incarnation import Fingerprint, Verdict, judge
from pipeline.kafka.probe import PartitionProbe, group_positions
from pipeline.worker.exits import exit_to_resume
from pipeline.worker.gate import Gated

log = logging.getLogger("preagg.worker")


def lost_metric(lost: Counter[str]) -> Metric:
    """``preagg_offsets_lost_total``: offsets Kafka deleted before this worker could count them."""
    m = CounterMetricFamily(
        "preagg_offsets_lost",
        "Offsets Kafka deleted (retention, deletion) before they were counted, as this worker found them",
        labels=["topic"],
    )
    for topic, n in sorted(lost.items()):
        m.add_metric([topic], float(n))
    return m


#: Seconds between two reads of the ledgers of diverged partitions (waiting for a reset).
WATCH_INTERVAL = 5.0
#: Seconds between two checks of the partitions whose consumption stopped moving.
RECHECK_INTERVAL = 30.0


class LedgerGuard:
    """Incarnation checks, Kafka-made gaps and diverged partitions of one worker."""

    def __init__(self, app: faust.App, sink: LedgerPort, probe: PartitionProbe, worker: str) -> None:
        self.app = app
        self.sink = sink
        self.probe = probe
        self.worker = worker
        #: Offsets deleted from Kafka before they were counted, by topic (``preagg_offsets_lost_total``).
        self.offsets_lost: Counter[str] = Counter()
        self._losses_seen: set[tuple[str, int, int, int]] = set()
        #: The ledgers of document families flushed apart (pipeline/core/families.py): Kafka's
        #: committed offsets must follow the lowest position of a partition's ledgers.
        self.families: list[FamilySink] = []

    async def positions(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """Per partition, the position below which every ledger of it has counted."""
        stored = await self.sink.load_positions(tps)
        for family in self.families:
            theirs = (await family.ledgers(tps)).positions
            for tp, n in theirs.items():
                mine = stored.get(tp)
                if n is not None and mine is not None:
                    stored[tp] = min(mine, n)
        return stored

    async def check(self, tp: tuple[str, int]) -> Verdict:
        """Is the partition Kafka serves the one its ledger describes?"""
        ledger = await self.sink.ledger(tp)
        if ledger is not None and ledger.behind is not None:
            # Its documents hold marks the ledger never gave out (found by a flush): held back.
            return Verdict("diverged", ledger.behind)
        for family in self.families:  # so found of a family's ledger: the partition is held back too
            theirs = await family.ledger(tp)
            if theirs is not None and theirs.behind is not None:
                return Verdict("diverged", theirs.behind)
        stored = None if ledger is None else ledger.next
        if ledger is None or stored is None:
            return judge(None, None, None)
        last = Fingerprint.from_doc(ledger.last)
        at = last.offset if last is not None else max(0, stored - 1)
        return judge(stored, last, await self.probe.look(tp[0], tp[1], at))

    async def _recheck(self, flushers: Sequence[Gated], seen: dict[tuple[str, int], int | None]) -> None:
        """Check the partitions that consumed nothing since the last look (or went backwards)."""
        assigned = {(t.topic, t.partition) for t in self.app.consumer.assignment()}
        for f in flushers:
            for tp in f.positions.assigned():
                if tp not in assigned or tp in f.diverged:
                    continue
                now = f.consumed.get(tp)
                before, seen[tp] = seen.get(tp), now
                if now is not None and before is not None and now > before:
                    continue  # consuming: Kafka serves a log that goes on
                try:
                    await f.recheck(tp)
                except Exception as exc:  # the broker or the store away: the next look tries again
                    log.info("%s[%d]: cannot check against its ledger now: %s", *tp, exc)

    async def on_diverged(self, tp: tuple[str, int], verdict: Verdict) -> None:
        """Stop reading the partition and write the verdict into its ledger, for status and operators."""
        self.app.consumer.pause_partitions([TP(*tp)])
        await self.sink.mark_diverged(tp, self.worker, verdict.reason)

    async def lost(self, tp: tuple[str, int], stored: int, start: int) -> None:
        """Kafka's log now starts at ``start``, past the ledger's ``next`` (``stored``): the offsets in
        between were deleted before they were counted. Said once per worker and range, loudly."""
        key = (tp[0], tp[1], stored, start)
        if key in self._losses_seen:
            return
        self._losses_seen.add(key)
        self.offsets_lost[tp[0]] += start - stored
        log.warning(
            "%s[%d]: offsets %d..%d were deleted from Kafka (retention or deletion) before they were "
            "counted: %d offsets lost; counting resumes at %d. `preagg status` shows it until an operator "
            "runs `preagg positions acknowledge --topic %s --partition %d` (docs/operations.md)",
            *tp,
            stored,
            start - 1,
            start - stored,
            start,
            *tp,
        )
        await self.sink.note_lost(tp, stored, start)

    async def at_assignment(self, tps: Iterable[tuple[str, int]]) -> None:
        """Compare the newly assigned partitions' ledgers with Kafka's view of them, at once.

        Kafka's committed offset past the ledger's ``next`` (and past the log's first offset):
        the worker points Kafka back at the ledgers and restarts (:meth:`resume_from_mongo`), as
        the gap check does when a record shows it; the log's first offset past ``next``: data
        lost before it was counted (:meth:`lost`).
        """
        stored = await self.positions(list(tps))
        known = {tp: n for tp, n in stored.items() if n is not None}
        kafka = await group_positions(self.probe.conn, self.sink.group, list(known))
        ahead = []
        for tp, n in sorted(known.items()):
            committed, start = kafka[tp]
            if start > n:
                await self.lost(tp, n, start)
            if committed is not None and committed > max(n, start):
                ahead.append(f"{tp[0]}[{tp[1]}] Kafka {committed}, MongoDB {n}")
        if ahead:
            await self.resume_from_mongo(
                f"Kafka's committed offsets are ahead of what MongoDB counted ({'; '.join(ahead)}); "
                "Kafka's committed offsets now follow MongoDB's"
            )

    async def on_gap(self, tp: tuple[str, int], stored: int, offset: int) -> None:
        """Kafka delivered ``offset`` first though the ledger's ``next`` is ``stored``."""
        probe = await self.probe.look(tp[0], tp[1], stored)
        first = probe.first[0] if probe.first is not None else None
        if probe.log_start > stored:
            await self.lost(tp, stored, probe.log_start)
        if first == offset or probe.log_start >= offset:
            what = "retention deleted them" if probe.log_start > stored else "Kafka holds no records there"
            log.info(
                "%s[%d]: offsets %d..%d hold nothing to count (%s: transaction markers, compaction or "
                "retention); counting resumes at %d",
                *tp,
                stored,
                offset - 1,
                what,
                offset,
            )
            return
        await self.resume_from_mongo(
            f"{tp[0]}[{tp[1]}]: Kafka delivered offset {offset} but MongoDB has counted only up to "
            f"{stored} and Kafka holds records in between; Kafka's committed offsets now follow MongoDB's"
        )

    async def resume_from_mongo(self, reason: str) -> None:
        """Point Kafka's committed offsets at MongoDB's positions for every assigned partition, restart.

        Always safe: everything below a ledger's ``next`` is counted.
        """
        consumer = self.app.consumer
        assigned = sorted(consumer.assignment())
        stored_all = await self.positions([(t.topic, t.partition) for t in assigned])
        lows = await consumer.earliest_offsets(*assigned)
        targets = {
            t: max(pos, lows.get(t, 0))
            for t in assigned
            if (pos := stored_all.get((t.topic, t.partition))) is not None
        }
        await consumer._commit(targets)  # type: ignore[attr-defined]
        exit_to_resume(reason)

    async def watch(self, flushers: Sequence[Gated]) -> None:
        """Restart the worker once an operator has reset the ledger of a diverged partition; check
        again, every :data:`RECHECK_INTERVAL` s, the partitions whose consumption stopped moving.

        A topic deleted and recreated under a running worker was never noticed on the embedded
        broker: its fetches past the new log's end returned nothing, so no position moved
        backwards and nothing triggered the check; the worker held the partitions, said it was
        ready and counted nothing. The recheck finds the log ending before the
        ledger's ``next`` and holds the partition back, as at assignment.
        """
        seen: dict[tuple[str, int], int | None] = {}
        last_recheck = time.monotonic()
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            if time.monotonic() - last_recheck >= RECHECK_INTERVAL:
                last_recheck = time.monotonic()
                await self._recheck(flushers, seen)
            for f in flushers:
                for tp in list(f.diverged):
                    ledger = await self.sink.ledger(tp)
                    if ledger is not None and ledger.diverged is None:
                        await self.resume_from_mongo(
                            f"{tp[0]}[{tp[1]}]: its ledger was reset by an operator "
                            f"(next={ledger.next}); restarting from it"
                        )
