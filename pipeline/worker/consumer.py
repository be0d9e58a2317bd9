"""Faust's Kafka consumer, reading committed records only.

Faust reads ``read_committed`` only when it runs Kafka transactions itself
(``processing_guarantee="exactly_once"``, which the embedded broker lacks, and which
our exactly-once does not use: MongoDB's transaction is the commit). Records of
aborted transactions from other producers (Kafka Streams, Flink, Connect,
Debezium) must never be counted, so the worker's consumer is switched to
``read_committed`` here; aiokafka applies it to every fetch.
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka


class ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread with an aiokafka consumer in ``read_committed`` mode."""

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka keeps the level until start() builds its fetcher with it.
        consumer._isolation_level = "read_committed"
        return consumer


class ReadCommittedConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer using :class:`ReadCommittedThread`."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)


def read_committed() -> None:
    """Make Faust's Kafka transport build :class:`ReadCommittedConsumer` (the worker process only)."""
    faust_aiokafka.Transport.Consumer = ReadCommittedConsumer
