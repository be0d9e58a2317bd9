"""Identified hits forwarded to the visits topic, on the real services: taken once by their names,
they are every identified hit exactly once, through two workers on keyless lines and a ``kill -9``.

The flush sends them once its intent is recorded and before its documents. A worker killed after
sending and before its ledger moved leaves its partitions' next owner to write the flush again
from the intent: it sends the same messages under the same names, which the receiver takes once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import TopicPartition

from pipeline.core.forwarded import Forwarded
from pipeline.core.visit_hits import Packed, VisitHit, unpack
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import groupless_consumer, read_to_end, start_or_close, topic_partitions
from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import audit_traffic, produce
from .test_exactly_once import crash_at

pytestmark = pytest.mark.integration


async def forwarded(settings: Settings, topic: str) -> tuple[list[tuple[int, Packed]], int]:
    """Every message of ``topic`` as read, with its partition, and the partitions' count."""
    c = await start_or_close(groupless_consumer(KafkaConnection.of(settings), reset="earliest"))
    try:
        parts = await topic_partitions(c, topic)
        got: list[tuple[int, Packed]] = []

        def take(tp: TopicPartition, r: Any) -> None:
            m = unpack(r.value)
            assert isinstance(m, Packed), m
            got.append((tp.partition, m))

        _, whole = await read_to_end(c, {TopicPartition(topic, p): None for p in parts}, take, timeout=120)
        assert whole
        return got, len(parts)
    finally:
        await c.stop()


def taken_once(messages: list[tuple[int, Packed]], partitions: int) -> tuple[list[VisitHit], int]:
    """The hits of the messages each destination takes once (pipeline/core/forwarded.py), and copies."""
    out: list[VisitHit] = []
    copies = 0
    for dest in range(partitions):
        taken = Forwarded()
        for p, m in messages:
            if p != dest:
                continue
            if taken.take((m.topic, m.partition), m.seq, m.index):
                assert all(h.visitor % partitions == dest for h in m.hits)  # one visitor, one place
                out.extend(m.hits)
        copies += taken.copies
    return out, copies


def test_identified_hits_are_forwarded_once_through_a_kill_and_two_workers(settings: Settings) -> None:
    """Killed inside its third flush's writes (intent recorded, hits sent, documents half written),
    then two workers on the keyless backlog: the flush written again sends its hits again, and
    taken once by their names the forwarded hits are the identified hits, each once."""
    settings = settings.with_(partitions=3, max_pending_keys=400).with_stream(HITS, visits=True)
    topic = settings.of(HITS).visits_topic
    traffic = generate(9_000, end=time.time(), days=2, seed=31, bad_share=0.01, visitors=400)
    asyncio.run(produce(settings, [(line, None) for line, _ in traffic.lines], pack=1))  # keyless
    log = crash_at(settings, "mid-commit:3")
    assert "fault injection: dying at" in log
    first = WorkerProcess(settings, "successor").start()
    second: WorkerProcess | None = None
    try:
        second = WorkerProcess(settings, "joins").start()
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=240))
    finally:
        if second is not None:
            assert second.terminate() == 0, second.log_path.read_text()[-3000:]
        assert first.terminate() == 0, first.log_path.read_text()[-3000:]
    logs = first.log_path.read_text() + (second.log_path.read_text() if second else "")
    assert "was cut short; writing its range" in logs
    problems, events = audit_traffic(settings, traffic)
    assert problems == [] and events == len(traffic.lines)

    messages, partitions = asyncio.run(forwarded(settings, topic))
    hits, copies = taken_once(messages, partitions)
    assert copies > 0, "the flush written again should have sent its hits again"
    assert Counter((h.site, h.page, int(h.ts // 60)) for h in hits) == traffic.per_minute
    keyed: dict[tuple[str, Any], set[int]] = {}
    for h in hits:
        keyed.setdefault((h.site, datetime.fromtimestamp(h.ts, UTC).date()), set()).add(h.visitor)
    assert {k: len(v) for k, v in keyed.items()} == {k: len(v) for k, v in traffic.visitors.items()}
