"""A worker in the group with no partition while messages wait: never unseen, never for long.

Two workers stopped at the same instant left the embedded broker's group in a state
where a new member joined every few seconds and was never given a partition
(reproduced with plain aiokafka consumers, two LeaveGroups at once, about a third of the
tries). Whatever the cause, the symptom is visible from inside the worker: it has held no
partition for :data:`IDLE_AFTER` seconds while some partition of its topics has
messages waiting and no flush for :data:`STALLED_AFTER` seconds. Then the worker:

- logs a WARNING with its member id and generation, and what waits;
- fails ``/health/ready`` (503) and sets ``preagg_worker_idle_while_waiting`` to 1;
- after :data:`RESTART_AFTER` more seconds in that state, exits for a restart
  (:data:`~pipeline.worker.exits.EXIT_FENCED`, restarted in place unless ``--no-restart``:
  a new process joins as a new member).

An idle worker in a group with more workers than partitions sees the others' flushes, so
it is never flagged; neither is one in a quiet pipeline (nothing waits).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client.core import GaugeMetricFamily, Metric

from pipeline.core.commit import TP, LedgerView
from pipeline.kafka.options import kafka_client_kwargs
from pipeline.kafka.probe import start_or_close, topic_partitions
from pipeline.settings import Settings

log = logging.getLogger("preagg.worker")

#: The group's stored ledgers of some topics (the sink's ``LedgerPort.ledgers_of``).
ReadLedgers = Callable[[Sequence[str]], Awaitable[dict[TP, LedgerView]]]

#: Seconds without a partition before the worker looks at what waits.
IDLE_AFTER = 60.0
#: A partition with messages waiting and no flush for this long is one nobody counts.
STALLED_AFTER = 60.0
#: Seconds flagged before the worker restarts to rejoin as a new member.
RESTART_AFTER = 60.0
#: Seconds between two looks.
EVERY = 15.0


@dataclass(frozen=True)
class Waiting:
    """What the broker and the ledgers say about the worker's topics."""

    #: ``topic[partition]`` → messages waiting, for partitions with no flush for :data:`STALLED_AFTER`.
    uncounted: dict[str, int]


def verdict(assigned: int, idle_for: float, waiting: Waiting | None) -> str | None:
    """The problem to report, or ``None`` (pure)."""
    if assigned or idle_for < IDLE_AFTER or waiting is None or not waiting.uncounted:
        return None
    shown = ", ".join(f"{k} ({n} waiting)" for k, n in sorted(waiting.uncounted.items())[:6])
    return (
        f"in the group with no partition for {idle_for:.0f} s while nothing counts {shown}"
        f"{' ...' if len(waiting.uncounted) > 6 else ''}"
    )


class IdleWatch:
    """The worker's loop that flags (and ends) a membership without partitions while messages wait."""

    def __init__(
        self,
        assigned: Callable[[], int],
        look: Callable[[], Awaitable[Waiting]],
        member: Callable[[], str],
        restart: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.assigned, self.look, self.member, self.restart = assigned, look, member, restart
        self.clock, self.sleep = clock, sleep
        #: The problem now (``/health/ready`` fails, the metric is 1), or ``None``.
        self.problem: str | None = None
        self._idle_since: float | None = None
        self._flagged_at: float | None = None

    async def check(self) -> None:
        """One look (the loop's body)."""
        now = self.clock()
        if self.assigned():
            self._idle_since = self._flagged_at = None
            self.problem = None
            return
        if self._idle_since is None:
            self._idle_since = now
        idle_for = now - self._idle_since
        waiting = await self.look() if idle_for >= IDLE_AFTER else None
        problem = verdict(0, idle_for, waiting)
        if problem is None:
            self.problem, self._flagged_at = None, None
            return
        if self.problem is None:
            self._flagged_at = now
            log.warning("%s; %s", problem, self.member())
        self.problem = problem
        if self._flagged_at is not None and now - self._flagged_at >= RESTART_AFTER:
            self.restart(f"{problem}: restarting to join the group as a new member")

    async def forever(self) -> None:
        """Look every :data:`EVERY` seconds until cancelled; a failed look is logged and retried."""
        while True:
            await self.sleep(EVERY)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker or the store away: the next look tries again
                log.info("cannot tell whether partitions wait uncounted: %s", exc)


async def look_at_topics(settings: Settings, ledgers: ReadLedgers, topics: list[str]) -> Waiting:
    """Partitions of ``topics`` with messages waiting and no flush for :data:`STALLED_AFTER` s.

    End offsets from a consumer of its own that never joins (ListOffsets: on the embedded
    broker it may under-report by a batch, never over-report), positions from the
    ledgers (``preagg_offsets``) or Kafka's committed offsets, whichever is further.
    """
    consumer = AIOKafkaConsumer(
        **kafka_client_kwargs(settings), group_id=settings.group_id, enable_auto_commit=False
    )
    await start_or_close(consumer)
    try:
        tps = [TopicPartition(t, p) for t in topics for p in await topic_partitions(consumer, t)]
        ends = await consumer.end_offsets(tps) if tps else {}
        ledger = await ledgers(topics)
        now = time.time()
        out = {}
        for tp in tps:
            seen = ledger.get((tp.topic, tp.partition))
            stored, at = (seen.next or 0, seen.at) if seen is not None else (0, 0.0)
            position = max(stored, await consumer.committed(tp) or 0)
            waiting = ends[tp] - position
            if waiting > 0 and now - at > STALLED_AFTER:
                out[f"{tp.topic}[{tp.partition}]"] = waiting
        return Waiting(out)
    finally:
        await consumer.stop()


def idle_metric(watch: IdleWatch) -> Metric:
    """``preagg_worker_idle_while_waiting``: 1 while the worker is flagged."""
    m = GaugeMetricFamily(
        "preagg_worker_idle_while_waiting",
        "1 while this worker is in the group with no partition and messages wait that nothing counts",
    )
    m.add_metric([], 1.0 if watch.problem is not None else 0.0)
    return m
