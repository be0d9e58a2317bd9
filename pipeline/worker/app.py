"""The Faust application: the hits agent, the flush timer, and the dead-letter topic.

Agents read raw bytes (``value_serializer="raw"``) so that a bad event reaches the
dead-letter topic exactly as it was sent, and use ``noack()`` streams: a message is
acked only by the flusher, after MongoDB acknowledged the write holding its events.
Faust commits acked offsets, and on shutdown and rebalance it waits for every
delivered message to be acked (``stream_wait_empty``) while the flush timer keeps
running, so SIGTERM flushes before exit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import faust
from faust.types import EventT, StreamT

from pipeline.aggregate.hits import HitCounts
from pipeline.ingest.hits import HitDecoder
from pipeline.schemas import hits_fields
from pipeline.settings import Settings
from pipeline.sinks.mongo import MongoSink, ensure_hits_indexes, mongo_client
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.flusher import Flusher

log = logging.getLogger("preagg.worker")


def faust_settings(settings: Settings) -> dict[str, Any]:
    """Faust configuration tuned for this pipeline and for the embedded broker."""
    return {
        "broker": settings.faust_broker,
        "store": "memory://",
        "topic_partitions": settings.partitions,
        "topic_replication_factor": 1,
        # Tansu holds a group join for half the session timeout (30 s by default).
        "broker_session_timeout": settings.session_timeout,
        "broker_heartbeat_interval": min(3.0, settings.session_timeout / 3),
        # Tansu reports ListOffsets in a way that makes this check crash on rebalance.
        "recovery_consistency_check": False,
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": min(1.0, settings.flush_interval),
        "stream_wait_empty": True,
        "web_enabled": settings.web_port > 0,
        "web_port": settings.web_port or 6066,
        "web_bind": "127.0.0.1",
        "web_host": "127.0.0.1",
        "datadir": str(settings.home / "faust-data" / settings.worker_id),
        "autodiscover": False,
        "stream_buffer_maxsize": 4096,
        "broker_max_poll_records": 2000,
    }


def build_app(settings: Settings) -> faust.App:
    """The worker's Faust app for the given (resolved) settings."""
    conf = faust_settings(settings)
    Path(conf["datadir"]).parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(settings.group_id, **conf)
    hits_topic = app.topic(
        settings.hits_topic,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
    )
    dead_topic = app.topic(
        settings.deadletter_topic,
        key_serializer="raw",
        value_serializer="raw",
        partitions=1,
    )
    client = mongo_client(settings.mongo_url or "")
    db = client[settings.db]
    sink = MongoSink(db)
    fields = hits_fields()

    async def send_dead(letters: Sequence[DeadLetter]) -> None:
        futures = [
            await dead_topic.send(key=d.topic.encode(), value=d.encode(settings.worker_id)) for d in letters
        ]
        for fut in futures:
            await fut

    async def ack(handle: object) -> object:
        stream, event = cast(tuple[StreamT[bytes], EventT[bytes]], handle)
        return await stream.ack(event)

    decoder = HitDecoder(settings.max_event_bytes, settings.future_skew)
    flusher: Flusher[HitCounts] = Flusher(
        "hits",
        lambda: HitCounts(decoder, fields),
        sink.write,
        send_dead,
        ack,
        settings.worker_id,
        settings.max_pending_keys,
        settings.fields_per_update,
    )
    app.preagg_flushers = [flusher]  # type: ignore[attr-defined]

    @app.task
    async def prepare() -> None:
        await ensure_hits_indexes(db, fields)
        log.info(
            "worker %s ready: hits from %r, MongoDB db %r",
            settings.worker_id,
            settings.hits_topic,
            settings.db,
        )

    @app.agent(hits_topic, name="hits")
    async def hits(stream: StreamT[bytes]) -> None:
        noack = stream.noack()  # type: ignore[attr-defined]
        async for event in noack.events():
            msg = event.message
            flusher.ingest((msg.topic, msg.partition), msg.offset, event.value, (noack, event))
            if flusher.should_flush():
                await flusher.flush()

    @app.timer(settings.flush_interval)
    async def periodic_flush() -> None:
        await flusher.flush()

    return app


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run one worker process until SIGTERM/SIGINT (flushes before exit)."""
    app = build_app(settings)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()
