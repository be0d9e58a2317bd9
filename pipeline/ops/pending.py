"""What is still waiting to be counted: the kind's messages in Kafka past the group's position.

An answer read while events are on their way is right about what was counted and wrong
about what was sent; it must say so. The broker knows where each partition
ends; the ledgers (``preagg_offsets``, written with the aggregates) and Kafka's committed
offsets know where the group is: the difference is what no query can see yet. How long
it takes: the messages waiting over the rate at which positions moved between two looks
(:class:`PendingWatch` keeps one per ``preagg serve``; a CLI query looks twice, a second
apart, only when something waits). A backlog whose position does not move while the
last flush grows old is reported as ``stalled``: a worker down, wedged or failing.

Offsets are not contiguous (compaction, transaction markers), so ``messages`` is at most
the number of messages waiting; a message may carry many events (packed producers).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kafka.options import kafka_client_kwargs
from pipeline.kafka.probe import start_or_close, topic_partitions
from pipeline.ops.lag import end_offsets
from pipeline.ops.ledger import read_ledger
from pipeline.settings import Settings

log = logging.getLogger("preagg.pending")

#: A backlog with no flush for this long is ``stalled`` (workers flush every second or so).
STALLED_AFTER = 60.0
#: Seconds without the position moving after which no time estimate is given.
STANDING = 25.0


@dataclass(frozen=True)
class Sample:
    """Where one topic's partitions end and where the group is, at one instant."""

    at: float
    ends: Mapping[int, int]
    positions: Mapping[int, int]
    #: When the group last flushed any of them (epoch seconds; 0: never).
    last_flush: float = 0.0

    @property
    def waiting(self) -> dict[int, int]:
        """Messages waiting per partition (partitions with none left out)."""
        out = {}
        for p, end in self.ends.items():
            n = end - self.positions.get(p, 0)
            if n > 0:
                out[p] = n
        return out


@dataclass(frozen=True)
class Pending:
    """What a client needs to know about an answer's completeness (``pending`` in the API)."""

    topic: str
    messages: int
    partitions: int
    #: About how long until they are counted, at the recent rate; ``None``: not known.
    seconds: float | None
    stalled: bool
    #: Seconds since the group's last flush (``None``: never flushed).
    last_flush_age: float | None
    #: When this was looked at (epoch seconds).
    at: float = 0.0

    def as_json(self, now: float | None = None) -> dict[str, Any]:
        """The ``pending`` field of an API answer (``checked``: seconds since the look)."""
        return {
            "complete": self.messages == 0,
            "messages": self.messages,
            "partitions": self.partitions,
            "seconds": None if self.seconds is None else round(self.seconds, 1),
            "stalled": self.stalled,
            "last_flush_age": None if self.last_flush_age is None else round(self.last_flush_age, 1),
            "topic": self.topic,
            "checked": round(max(0.0, (now or time.time()) - self.at), 1),
        }

    def note(self) -> str:
        """One line for the CLI (empty when nothing waits)."""
        if not self.messages:
            return ""
        where = f"{self.messages} message{'s' if self.messages != 1 else ''} of {self.topic}"
        where += f" on {self.partitions} partition{'s' if self.partitions != 1 else ''}"
        if self.stalled:
            age = "never" if self.last_flush_age is None else f"{self.last_flush_age:.0f} s ago"
            return (
                f"not complete: {where} wait to be counted and no worker is counting them "
                f"(last flush {age}; see preagg status)"
            )
        eta = f", about {max(1, round(self.seconds))} s more" if self.seconds is not None else ""
        return f"not complete yet: {where} still to be counted{eta}"


def pending(topic: str, now: Sample, before: Sample | None = None, rate: float | None = None) -> Pending:
    """Compare where the partitions end with where the group is; the rate from ``before`` (or given)."""
    waiting = now.waiting
    messages = sum(waiting.values())
    if rate is None and before is not None:
        rate = rate_between(before, now)
    age = now.at - now.last_flush if now.last_flush else None
    stalled = bool(messages) and (age is None or age > STALLED_AFTER)
    seconds = messages / rate if messages and rate else (0.0 if not messages else None)
    return Pending(topic, messages, len(waiting), seconds, stalled, age, now.at)


def rate_between(before: Sample, now: Sample) -> float | None:
    """Messages counted per second between two looks (``None``: no time between them)."""
    if now.at <= before.at:
        return None
    moved = sum(max(0, now.positions.get(p, 0) - before.positions.get(p, 0)) for p in now.ends)
    return moved / (now.at - before.at)


def positions(ledger: Iterable[Mapping[str, Any]], committed: Mapping[int, int | None]) -> dict[int, int]:
    """Per partition, how far the group has counted: its ledger, or Kafka's committed offset if ahead."""
    out = {p: c or 0 for p, c in committed.items()}
    for doc in ledger:
        out[doc["partition"]] = max(out.get(doc["partition"], 0), int(doc.get("next") or 0))
    return out


async def sample(
    settings: Settings,
    db: AsyncDatabase[dict[str, Any]],
    consumer: AIOKafkaConsumer,
    topic: str,
    exact_ends: bool = True,
) -> Sample | None:
    """One look at ``topic`` (``None``: the topic does not exist).

    ``exact_ends=False`` takes ListOffsets as it comes: on the embedded broker, which answers
    the last batch's first offset plus one, a backlog is still seen (the end is past the
    position) but its size may be under-reported; it spares a CLI query the fetch that
    learns the exact end (up to half a second).
    """
    parts = await topic_partitions(consumer, topic)
    if not parts:
        return None
    tps = [TopicPartition(topic, p) for p in parts]
    ends = await end_offsets(consumer, tps, settings.embedded_kafka and exact_ends)
    committed = {tp.partition: await consumer.committed(tp) for tp in tps}
    ledger = await read_ledger(db, settings.group_id, [topic])
    last = max((float(d.get("at") or 0.0) for d in ledger), default=0.0)
    return Sample(time.time(), {tp.partition: ends[tp] for tp in tps}, positions(ledger, committed), last)


def looker(settings: Settings) -> AIOKafkaConsumer:
    """A consumer that reads offsets only (the group's committed ones; it never joins)."""
    return AIOKafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=settings.group_id,
        enable_auto_commit=False,
    )


async def look_once(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], topic: str, again_after: float = 1.0
) -> Pending | None:
    """For one CLI query: one look, and a second ``again_after`` s later when something waits."""
    consumer = looker(settings)
    await start_or_close(consumer)
    try:
        first = await sample(settings, db, consumer, topic, exact_ends=False)
        if first is None:
            return None
        if not first.waiting or again_after <= 0:
            return pending(topic, first)
        await asyncio.sleep(again_after)
        second = await sample(settings, db, consumer, topic, exact_ends=False)
        return pending(topic, second or first, first)
    finally:
        await consumer.stop()


class PendingWatch:
    """``preagg serve``'s view of every kind's backlog, refreshed in the background.

    Answers never wait for the broker: each takes the latest look (at most ``every``
    seconds old). The rate is smoothed over the looks of the last minute or so.
    """

    def __init__(
        self, settings: Settings, db: AsyncDatabase[dict[str, Any]], topics: list[str], every: float = 2.0
    ) -> None:
        self.settings, self.db, self.topics, self.every = settings, db, topics, every
        self.latest: dict[str, Pending] = {}
        self._before: dict[str, Sample] = {}
        self._rate: dict[str, float] = {}
        #: When the group's position on each topic last moved (no estimate once it stands still).
        self._moved: dict[str, float] = {}
        #: Looks that failed (the broker or the store did not answer), each logged once a minute at most.
        self.failures = 0
        self._failure_logged = 0.0

    def of(self, topic: str) -> Pending | None:
        """The latest look at ``topic`` (``None``: none yet)."""
        return self.latest.get(topic)

    def looks(self) -> dict[str, Sample]:
        """The latest look at each topic (where its partitions end and where the group is)."""
        return {t: s for t, s in self._before.items() if t in self.latest}

    async def forever(self) -> None:
        """Look every ``every`` seconds until cancelled; a failed look keeps the previous answer."""
        consumer: AIOKafkaConsumer | None = None
        try:
            while True:
                try:
                    if consumer is None:
                        consumer = await start_or_close(looker(self.settings))
                    for topic in self.topics:
                        await self._look(consumer, topic)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the broker or store away: answers keep the last look
                    self.failures += 1
                    if time.monotonic() - self._failure_logged > 60:
                        self._failure_logged = time.monotonic()
                        log.warning("cannot tell what waits to be counted: %s", exc)
                await asyncio.sleep(self.every)
        finally:
            if consumer is not None:
                await consumer.stop()

    async def _look(self, consumer: AIOKafkaConsumer, topic: str) -> None:
        now = await sample(self.settings, self.db, consumer, topic)
        if now is None:
            self.latest.pop(topic, None)
            return
        before = self._before.get(topic)
        instant = rate_between(before, now) if before is not None else None
        if instant is not None:
            old = self._rate.get(topic)
            # about a minute of memory at a look every 2 s
            self._rate[topic] = instant if old is None else 0.9 * old + 0.1 * instant
            if instant:
                self._moved[topic] = now.at
        self._before[topic] = now
        rate = self._rate.get(topic) or None
        if now.at - self._moved.get(topic, 0.0) > STANDING:
            rate = None  # the position stands still: no estimate (a worker may be stopped)
        self.latest[topic] = pending(topic, now, rate=rate)
