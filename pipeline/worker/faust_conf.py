"""The Faust configuration of a worker: every group timeout set, tuned for this pipeline and Tansu."""

from __future__ import annotations

import logging
from typing import Any

from faust.tables import TableManager

from pipeline.kafka.options import KafkaConnection
from pipeline.settings import Settings


class TablesAtOnce(TableManager):
    """Faust's table manager without the second it sleeps when starting.

    Faust sleeps so that agents declared after the app starts register their streams before the
    consumer subscribes. A worker declares none: its topics are added when it is wired, before
    the app starts, and it keeps no Faust tables. The second was on every worker's way to its
    first record (a group join, a restart, a scale-up), 1.0 s of the 11 s from process start in
    which the hot shape of ``make bench-peers`` is read and written.
    """

    #: Its lines are Faust's, kept out of preagg's log as Faust's own (pipeline/core/logs.py).
    logger = logging.getLogger("faust.tables.at_once")

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


def faust_settings(settings: Settings) -> dict[str, Any]:
    """Faust configuration tuned for this pipeline and for the embedded broker."""
    return {
        "broker": settings.faust_broker,
        "store": "memory://",
        "topic_partitions": settings.partitions,
        "topic_replication_factor": 1,
        # No `<group>-__assignor-__leader` topic: nothing here uses Faust's leader election
        # (on_leader timers), and Faust would create it at every start with replication
        # factor 1, which clusters restricting replication factors or denying CREATE refuse.
        "topic_disable_leader": True,
        # The embedded Tansu holds a group join for half the session timeout (30 s by default).
        # Every group timeout is set here, not left to Faust's defaults: the revoke drain is
        # bounded at half the rebalance timeout (bounded_revoke below), and the request
        # timeout must exceed the session timeout (aiokafka refuses otherwise).
        "broker_session_timeout": settings.session_timeout,
        "broker_heartbeat_interval": min(3.0, settings.session_timeout / 3),
        "broker_rebalance_timeout": settings.rebalance_timeout,
        "broker_request_timeout": max(40.0, settings.session_timeout + 5.0),
        # The embedded Tansu answers ListOffsets in a way that makes this check crash on
        # rebalance; real Kafka keeps Faust's default.
        "recovery_consistency_check": not settings.embedded_kafka,
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": min(1.0, settings.flush_interval),
        "stream_wait_empty": True,
        "broker_credentials": KafkaConnection.of(settings).faust_credentials(),
        "web_enabled": settings.web_port > 0,
        "web_port": settings.web_port or 6066,
        "web_bind": settings.web_bind,
        "web_host": "127.0.0.1",
        "datadir": str(settings.home / "faust-data" / settings.worker_id),
        "autodiscover": False,
        "stream_buffer_maxsize": 4096,
        # Records per fetch call: each call crosses from Faust's consumer thread to the event
        # loop; 10,000 instead of 2,000 took one event per message from 39k to 43k events/s.
        "broker_max_poll_records": 10000,
        "TableManager": TablesAtOnce,
    }
