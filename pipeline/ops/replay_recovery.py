"""Which events of a replay cut short already reached their topics: read back, not guessed.

A replay cannot send its events and record its progress in one atomic step (Tansu
has no Kafka transactions, and a replay must work on it), so before sending it
records where each partition of every topic it sends to ends: the *marks*. A run
that finds marks left behind reads those partitions from the marks to their ends and
collects the ``from`` of each wrapper there (:func:`pipeline.core.replay.origin_of`):
those dead letters went, and are not sent again; the others are. This is the usual
recovery of a producer without transactions: look at what you wrote.

The marks come from ListOffsets(latest). Tansu answers it with the base offset of the last
record batch, below the true end (measured: docs/benchmarks.md); a low
mark only makes the read-back longer. The read-back finds only what is still in the
log: if the topic's retention deleted some sends before the next run (or the topic was
deleted and recreated), those are sent again, and count twice if workers had counted
them. It is meant for a run again within hours of a crash, not weeks later.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from aiokafka import ConsumerRecord, TopicPartition

from pipeline.core.envelope import unpack
from pipeline.core.errors import PreaggError
from pipeline.core.replay import key_of, origin_of
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import groupless_consumer, read_to_end, start_or_close, topic_partitions
from pipeline.settings import Settings

#: How :func:`sent_since` tells a wrapper's ``key`` from its ``from`` in the set it returns.
KEY_PREFIX = "key:"

log = logging.getLogger("preagg.deadletters")

#: Where each partition of each target topic ended: topic → partition → offset.
Marks = dict[str, dict[int, int]]


class ReadBackFailed(PreaggError, RuntimeError):
    """The read-back did not reach the partitions' ends in time: sending now could count twice."""


def merge_marks(a: Marks, b: Marks) -> Marks:
    """Both runs' marks: the lower per partition, so that the read-back covers both runs' sends."""
    out = {t: dict(ps) for t, ps in a.items()}
    for t, ps in b.items():
        mine = out.setdefault(t, {})
        for p, n in ps.items():
            mine[p] = min(n, mine.get(p, n))
    return out


def marks_to_doc(marks: Marks) -> list[dict[str, object]]:
    """Marks as a MongoDB value (a list: topic names may hold dots, field names may not)."""
    return [
        {"topic": t, "partition": p, "offset": n}
        for t, ps in sorted(marks.items())
        for p, n in sorted(ps.items())
    ]


def marks_from_doc(doc: Iterable[dict[str, object]]) -> Marks:
    """The inverse of :func:`marks_to_doc`."""
    out: Marks = {}
    for m in doc:
        out.setdefault(str(m["topic"]), {})[int(str(m["partition"]))] = int(str(m["offset"]))
    return out


async def end_marks(settings: Settings, topics: Iterable[str]) -> Marks:
    """Where every partition of ``topics`` ends now (ListOffsets(latest))."""
    c = groupless_consumer(KafkaConnection.of(settings), "earliest")
    await start_or_close(c)
    try:
        tps = [TopicPartition(t, p) for t in sorted(set(topics)) for p in await topic_partitions(c, t)]
        ends = await c.end_offsets(tps) if tps else {}
    finally:
        await c.stop()
    out: Marks = {}
    for tp, n in ends.items():
        out.setdefault(tp.topic, {})[tp.partition] = n
    return out


async def sent_since(settings: Settings, marks: Marks, timeout: float = 300.0) -> set[str]:
    """The ``from`` and ``key`` of every replay wrapper in the marked partitions, from the marks to the ends.

    Raises :class:`ReadBackFailed` if the ends are not reached within ``timeout``:
    the caller must then send nothing (a wrapper not yet read may be one of its own).
    """
    tps: dict[TopicPartition, int | None] = {
        TopicPartition(t, p): n for t, ps in marks.items() for p, n in ps.items()
    }
    if not tps:
        return set()
    found: set[str] = set()

    def collect(tp: TopicPartition, r: ConsumerRecord[bytes, bytes]) -> None:
        for line in unpack(r.value or b""):
            source = origin_of(line)
            if source is not None:
                found.add(source)
            key = key_of(line)
            if key is not None:
                found.add(KEY_PREFIX + key)

    c = groupless_consumer(KafkaConnection.of(settings), "earliest")
    await start_or_close(c)
    try:
        _, complete = await read_to_end(c, tps, collect, timeout)
    finally:
        await c.stop()
    if not complete:
        raise ReadBackFailed(
            f"could not read {len(tps)} partitions back to their ends in {timeout:.0f} s; nothing re-sent"
        )
    return found
