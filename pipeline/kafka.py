"""Kafka helpers shared by producers, operators and tests: topics and partitioning."""

from __future__ import annotations

import contextlib

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.partitioner import murmur2

from pipeline.security import kafka_client_kwargs
from pipeline.settings import Settings


def partition_for(key: bytes, partitions: int) -> int:
    """Kafka's default partition of ``key`` (murmur2, as the Java client and aiokafka compute it)."""
    h: int = murmur2(key)
    return (h & 0x7FFFFFFF) % partitions


async def ensure_topics(settings: Settings, *topics: str) -> None:
    """Create the given topics (with ``settings.partitions``) if they do not exist."""
    admin = AIOKafkaAdminClient(**kafka_client_kwargs(settings))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            # another worker or producer may create one meanwhile: that is fine
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [NewTopic(t, num_partitions=settings.partitions, replication_factor=1) for t in missing]
                )
    finally:
        await admin.close()
