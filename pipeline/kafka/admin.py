"""Kafka helpers shared by producers, operators and tests: topics, their settings, partitioning.

Topics are created by ``preagg setup`` (or by a worker with ``PREAGG_AUTO_SETUP``, the
embedded default): brokers often run with ``auto.create.topics.enable=false``, and one
that auto-creates would pick its own partition count and replication factor.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.partitioner import murmur2

from pipeline.kafka.options import KafkaConnection
from pipeline.settings import Settings

log = logging.getLogger("preagg.kafka")


def partition_for(key: bytes, partitions: int) -> int:
    """Kafka's default partition of ``key`` (murmur2, as the Java client and aiokafka compute it)."""
    h: int = murmur2(key)
    return (h & 0x7FFFFFFF) % partitions


def _entries(responses: Iterable[Any]) -> dict[str, str]:
    """Config name → value from DescribeConfigs responses (any version)."""
    out: dict[str, str] = {}
    for resp in responses:
        for resource in getattr(resp, "resources", []):
            if resource[0] != 0:  # error code
                continue
            for entry in resource[4]:
                if entry[1] is not None:
                    out[entry[0]] = entry[1]
    return out


@dataclass(frozen=True)
class TopicSpec:
    """How the topics preagg creates are made; existing topics are never changed."""

    partitions: int
    #: 0: the broker's ``default.replication.factor`` (at most the number of brokers).
    replication_factor: int = 0
    #: ``None``: the broker's ``min.insync.replicas``.
    min_insync_replicas: int | None = None

    @classmethod
    def of(cls, settings: Settings, partitions: int | None = None) -> TopicSpec:
        """``PREAGG_PARTITIONS`` (or ``partitions``), replication factor and ``min.insync.replicas``."""
        s = settings
        return cls(partitions or s.partitions, s.replication_factor, s.min_insync_replicas)


async def topic_configs(conn: KafkaConnection, topic: str) -> dict[str, str]:
    """The topic's configuration as the broker reports it (empty when it cannot say)."""
    admin = AIOKafkaAdminClient(**conn.client_kwargs())
    await admin.start()
    try:
        resp = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        return _entries(resp)
    except Exception as exc:  # an older or embedded broker without DescribeConfigs
        log.info("cannot read the configuration of topic %s (%s)", topic, exc)
        return {}
    finally:
        await admin.close()


async def _replication_factor(admin: AIOKafkaAdminClient, spec: TopicSpec) -> int:
    """The replication factor to create topics with (0 in the spec: the broker's default)."""
    if spec.replication_factor > 0:
        return spec.replication_factor
    cluster = await admin.describe_cluster()
    brokers = cluster.get("brokers") or []
    with contextlib.suppress(Exception):
        broker = str(brokers[0]["node_id"]) if brokers else "0"
        resp = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, broker)])
        value = _entries(resp).get("default.replication.factor")
        if value and int(value) > 0:
            return min(int(value), max(1, len(brokers)))
    return max(1, min(3, len(brokers)))


async def missing_topics(conn: KafkaConnection, topics: Iterable[str]) -> list[str]:
    """The topics among ``topics`` that the cluster does not have."""
    admin = AIOKafkaAdminClient(**conn.client_kwargs())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
    finally:
        await admin.close()
    return [t for t in topics if t not in existing]


async def ensure_topics(conn: KafkaConnection, topics: Iterable[str], spec: TopicSpec) -> list[str]:
    """Create the topics that do not exist yet, as ``spec`` says; returns the ones created."""
    admin = AIOKafkaAdminClient(**conn.client_kwargs())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if not missing:
            return []
        rf = await _replication_factor(admin, spec)
        configs = {"min.insync.replicas": str(spec.min_insync_replicas)} if spec.min_insync_replicas else {}
        new = [
            NewTopic(
                t,
                num_partitions=spec.partitions,
                replication_factor=rf,
                topic_configs=configs,
            )
            for t in missing
        ]
        # another worker or producer may create one meanwhile: that is fine
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics(new)
        return missing
    finally:
        await admin.close()
