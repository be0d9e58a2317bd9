"""How far behind its partitions' ends a stream is: whether its flush may wait for a bigger batch.

A worker catching up a backlog lets its batch grow (``PREAGG_BACKLOG_FLUSH_INTERVAL``,
docs/design.md "Reading while writing"): each document is then written once. The count
must include the partitions that have delivered nothing yet. A worker starting on a
4-partition backlog read one partition to its end before the broker's first answers for
the other three came; those three were left out (no position, no end known), the stream
looked caught up, and it flushed that one partition alone: 72,000 document writes instead
of 47,000 and half the throughput (bench-peers, keyless long shape, 2026-11-27). For such a
partition the consumer is asked its position and the broker the partition's end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from aiokafka.errors import KafkaError

log = logging.getLogger("preagg.flush")

#: Messages behind the partitions' ends past which a worker is catching up a backlog.
BACKLOG_MESSAGES = 1000
#: Seconds the two questions about unread partitions may take before the answer is "not behind".
ASK_TIMEOUT = 2.0


class Consumer(Protocol):
    """What is asked of Faust's consumer (its assignment, the ends it has seen, and questions)."""

    def assignment(self) -> Iterable[Any]: ...

    def highwater(self, tp: Any) -> int | None: ...

    async def highwaters(self, *partitions: Any) -> Mapping[Any, int]: ...

    async def position(self, tp: Any) -> int | None: ...


async def behind(
    consumer: Consumer,
    topic: str,
    consumed: Mapping[tuple[str, int], int],
    settled: set[tuple[str, int]] | None = None,
) -> int:
    """Messages of ``topic``'s assigned partitions not read yet.

    A partition that has delivered nothing yet counts its end minus the consumer's position,
    asked only when the others alone are not past :data:`BACKLOG_MESSAGES` (two broker
    calls; a failure or a slow answer counts it as caught up: the flush goes ahead, as before).
    ``settled`` (the caller's, emptied at each assignment) keeps those found at their end, so
    that an idle partition is not asked again at every flush of live traffic: its next
    message makes it a consumed one.
    """
    total = 0
    unread = []
    for tp in consumer.assignment():
        if tp.topic != topic:
            continue
        got = consumed.get((tp.topic, tp.partition))
        if got is None:
            if settled is None or (tp.topic, tp.partition) not in settled:
                unread.append(tp)
            continue
        hw = consumer.highwater(tp)
        if hw is not None:
            total += max(0, hw - got)
    if total > BACKLOG_MESSAGES or not unread:
        return total
    try:
        async with asyncio.timeout(ASK_TIMEOUT):
            ends = await consumer.highwaters(*unread)
            for tp in unread:
                end, at = ends.get(tp), await consumer.position(tp)
                if end is not None and at is not None:
                    total += max(0, end - at)
                    if end <= at and settled is not None:
                        settled.add((tp.topic, tp.partition))
    except (TimeoutError, KafkaError, OSError) as exc:  # not known to be behind: flush
        log.info("%s: an unread partition's end or position unknown (%s: %s)", topic, type(exc).__name__, exc)
    return total
