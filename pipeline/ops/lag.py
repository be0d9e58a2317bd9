"""Consumer-group lag read from the broker: end offsets against committed offsets.

On the embedded broker, end offsets come from a fetch's high watermark, not from
ListOffsets alone: Tansu answers ListOffsets(latest) with the base offset of the last
record batch plus one, which under-reports the end whenever that batch holds several
records. Reading the last batch costs one small fetch per partition; on real Kafka,
whose ListOffsets is exact, that fetch is skipped.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from pipeline.kafka.options import kafka_client_kwargs
from pipeline.kafka.probe import start_or_close, topic_partitions
from pipeline.ops.ledger import counted_to
from pipeline.settings import Settings
from pipeline.store.client import mongo_client

#: How long a fetch may take to tell a partition's end on the embedded broker.
FETCH_END_SECONDS = 30.0


@dataclass(frozen=True)
class PartitionLag:
    """Position of the group on one partition."""

    topic: str
    partition: int
    end: int
    committed: int

    @property
    def lag(self) -> int:
        """Messages not yet committed by the group."""
        return max(0, self.end - self.committed)


async def group_lag(settings: Settings, topics: list[str]) -> list[PartitionLag]:
    """Lag of ``settings.group_id`` on every partition of ``topics``."""
    return await _read_log(settings, topics, with_committed=True)


async def log_ends(settings: Settings, topics: list[str]) -> list[tuple[str, int, int]]:
    """``(topic, partition, end offset)`` of every partition of ``topics``: no group's offsets read."""
    return [(p.topic, p.partition, p.end) for p in await _read_log(settings, topics, with_committed=False)]


async def _read_log(settings: Settings, topics: list[str], with_committed: bool) -> list[PartitionLag]:
    consumer = AIOKafkaConsumer(
        **kafka_client_kwargs(settings),
        group_id=settings.group_id if with_committed else None,
        enable_auto_commit=False,
    )
    await start_or_close(consumer)
    try:
        tps: list[TopicPartition] = []
        for t in topics:
            tps.extend(TopicPartition(t, p) for p in await topic_partitions(consumer, t))
        if not tps:
            return []
        ends = await end_offsets(consumer, tps, settings.embedded_kafka)
        out = []
        for tp in tps:
            committed = await consumer.committed(tp) if with_committed else 0
            out.append(PartitionLag(tp.topic, tp.partition, ends[tp], committed or 0))
        return out
    finally:
        await consumer.stop()


async def uncounted(settings: Settings, topics: list[str]) -> list[tuple[str, int, int, int]] | None:
    """The partitions of ``topics`` whose ledgers (the kind's and its families') stand below the
    log's end, as ``(topic, partition, counted to, end)``; ``None`` when the topics have no
    partitions. The ledgers decide what is counted, never Kafka's committed offsets: a partition
    held back acks what it reads while its ledger says "not counted"."""
    ends = await log_ends(settings, topics)
    if not ends:
        return None
    client = mongo_client(settings.mongo_url or "")
    try:
        counted = await counted_to(client[settings.db], settings.group_id, topics)
    finally:
        await client.close()
    at = [(t, p, counted.get((t, p), 0), end) for t, p, end in ends]
    return [row for row in at if row[2] < row[3]]


async def end_offsets(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], embedded: bool = True
) -> dict[TopicPartition, int]:
    """True end offset per partition: ListOffsets, and on the embedded broker a fetch's high watermark."""
    reported: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    probe = [tp for tp in tps if reported[tp] > 0] if embedded else []
    if not probe:
        return reported
    consumer.assign(probe)
    for tp in probe:
        consumer.seek(tp, reported[tp] - 1)
    # Never the lagging answer instead: a caller waiting for a group to reach the end would stop a
    # batch early. This used to give up after 2.5 s, which a loaded machine's fetch can exceed.
    deadline = time.monotonic() + FETCH_END_SECONDS
    while True:
        await consumer.getmany(*probe, timeout_ms=500)
        missing = [tp for tp in probe if consumer.highwater(tp) is None]
        if not missing:
            break
        if time.monotonic() > deadline:
            named = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in missing)
            raise TimeoutError(f"no fetch answered for {named} within {FETCH_END_SECONDS:.0f}s: end unknown")
    return {tp: max(reported[tp], consumer.highwater(tp) or 0) if tp in probe else 0 for tp in tps}


async def wait_caught_up(
    settings: Settings, topics: list[str], timeout: float = 300.0, poll: float = 0.5
) -> list[PartitionLag]:
    """Wait until the group has committed every message now in ``topics``."""
    deadline = time.monotonic() + timeout
    while True:
        lags = await group_lag(settings, topics)
        if lags and all(p.lag == 0 for p in lags):
            return lags
        if time.monotonic() > deadline:
            raise TimeoutError(f"group {settings.group_id} not caught up: {lags}")
        await asyncio.sleep(poll)
