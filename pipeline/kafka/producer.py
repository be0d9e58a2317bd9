"""Producer API: send events to a topic, packed per partition.

Each event has a key (for hits: site and page, :func:`pipeline.kinds.hits.files.hit_key`)
that decides its partition, so one site/page always lands on one partition and is
aggregated by one worker. Events of one partition are packed ``pack_size`` to a message (NDJSON, see
:mod:`pipeline.core.envelope`); ``pack_size=1`` sends classic single-event
messages, keyed, which land on the same partitions.

    async with EventProducer(settings, settings.topic("hits")) as p:
        hit = {"site": "example.com", "page": "/", "ts": time.time()}
        await p.send_event(hit, hit_key("example.com", "/"))
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from pipeline.core.envelope import pack
from pipeline.files import Record, Refused, Skipped
from pipeline.kafka.admin import TopicSpec, ensure_topics, missing_topics, partition_for, topic_configs
from pipeline.kafka.options import KafkaConnection
from pipeline.settings import Settings

#: Bytes of a Kafka record batch besides the value (headers, key, framing), kept free below the limit.
RECORD_OVERHEAD = 16 * 1024
#: Seconds an idempotent producer may take to get its producer id before ``auto`` gives up on it.
IDEMPOTENCE_PROBE_SECONDS = 10.0

log = logging.getLogger("preagg.producer")

#: Per bootstrap address, whether its brokers gave an idempotent producer an id (asked once a process).
_IDEMPOTENCE: dict[str, bool] = {}


def _probe_refusal(record: logging.LogRecord) -> bool:
    """Drop aiokafka's ERROR for a broker refusing InitProducerId while idempotence is probed."""
    return not str(record.msg).startswith("Unexpected error during InitProducerIdRequest")


class EventProducer:
    """Buffers encoded events per partition and sends them packed."""

    def __init__(self, settings: Settings, topic: str, pack_size: int | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self.pack_size = max(1, pack_size if pack_size is not None else settings.pack_size)
        #: Largest message value sent: a pack is closed before it would pass this (set at start
        #: from the topic's ``max.message.bytes`` when the broker tells, else the setting).
        self.max_message_bytes = settings.max_message_bytes
        self.idempotent = False
        #: Built by :meth:`start` (an aiokafka producer never started warns when collected).
        self._producer: AIOKafkaProducer | None = None
        self._buffers: dict[int, list[bytes]] = {}
        self._sizes: dict[int, int] = {}
        self._keys: dict[int, bytes | None] = {}
        #: Next partition of a keyless message (round robin, as a plain client spreads them).
        self._next_keyless = 0
        self._inflight: list[asyncio.Future[Any]] = []
        self._partitions = settings.partitions
        self.sent_events = 0
        self.sent_messages = 0

    def _new_producer(self, idempotent: bool) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **self.conn.client_kwargs(),
            acks="all",
            enable_idempotence=idempotent,
            linger_ms=5,
            max_batch_size=1 << 20,
            max_request_size=self.max_message_bytes + RECORD_OVERHEAD,
            compression_type=None,
        )

    @property
    def producer(self) -> AIOKafkaProducer:
        """The aiokafka producer (after :meth:`start`)."""
        if self._producer is None:
            raise RuntimeError("the producer is not started")
        return self._producer

    @property
    def conn(self) -> KafkaConnection:
        """The brokers and credentials of the settings."""
        return KafkaConnection.of(self.settings)

    async def _start_producer(self) -> None:
        """Start idempotent where the broker supports it (``auto``), else say what that costs."""
        mode = self.settings.producer_idempotence
        known = _IDEMPOTENCE.get(self.settings.kafka_bootstrap)
        if mode == "off" or (mode == "auto" and known is False):
            self._producer = self._new_producer(idempotent=False)
            await self._producer.start()
            return
        self._producer = self._new_producer(idempotent=True)
        sender_log = logging.getLogger("aiokafka.producer.sender")
        sender_log.addFilter(_probe_refusal)  # the refusal is an answer here, not an error
        try:
            async with asyncio.timeout(IDEMPOTENCE_PROBE_SECONDS):
                await self._producer.start()
            self.idempotent = _IDEMPOTENCE[self.settings.kafka_bootstrap] = True
            return
        except Exception as exc:
            if self._producer is not None:
                await self._producer.stop()
            if mode == "on":
                raise RuntimeError(f"the broker refused an idempotent producer: {exc!r}") from exc
            _IDEMPOTENCE[self.settings.kafka_bootstrap] = False
            # Expected of the embedded broker (INFO); a real cluster without it is worth a WARNING.
            log.log(
                logging.INFO if self.settings.embedded_kafka else logging.WARNING,
                "the broker does not support idempotent producers (%r): a broker failover may write "
                "a message twice; exactly-once then holds relative to the log (docs/deployment.md)",
                exc,
            )
        finally:
            sender_log.removeFilter(_probe_refusal)
        self._producer = self._new_producer(idempotent=False)
        await self._producer.start()

    async def start(self) -> None:
        """Connect, check (or create) the topic, learn its partition count and message size limit."""
        if self.settings.auto_setup:
            await ensure_topics(self.conn, [self.topic], TopicSpec.of(self.settings))
        elif await missing_topics(self.conn, [self.topic]):
            raise RuntimeError(
                f"topic {self.topic} does not exist: run `preagg setup` (or set PREAGG_AUTO_SETUP)"
            )
        # The embedded broker answers no DescribeConfigs: the setting is the limit there.
        configs = {} if self.settings.embedded_kafka else await topic_configs(self.conn, self.topic)
        limit = configs.get("max.message.bytes")
        if limit and int(limit) - RECORD_OVERHEAD < self.max_message_bytes:
            self.max_message_bytes = int(limit) - RECORD_OVERHEAD
        await self._start_producer()
        parts = await self.producer.partitions_for(self.topic)
        self._partitions = len(parts)

    async def stop(self) -> None:
        """Send what is buffered, wait for the broker's acks, disconnect."""
        try:
            await self.flush()
        finally:
            if self._producer is not None:
                await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def send_raw(self, line: bytes, key: bytes | None) -> None:
        """Queue one already encoded event (one line, no newline inside).

        ``key`` ``None``: a keyless message, as log shippers and plain clients send; such
        messages go round robin over the partitions, so one site's events reach every
        partition (and every worker).
        """
        if b"\n" in line:
            raise ValueError("an event line must not contain a newline")
        if len(line) > self.max_message_bytes:
            raise ValueError(
                f"an event of {len(line)} bytes exceeds the largest message ({self.max_message_bytes})"
            )
        if key is None:
            part = self._next_keyless % self._partitions
            self._next_keyless += 1
        else:
            part = partition_for(key, self._partitions)
        if self._sizes.get(part, 0) + len(line) + 1 > self.max_message_bytes:
            await self._send_partition(part)  # close the pack before it passes the broker's limit
        buf = self._buffers.setdefault(part, [])
        if not buf:
            self._keys[part] = key
        buf.append(line)
        self._sizes[part] = self._sizes.get(part, 0) + len(line) + 1
        if len(buf) >= self.pack_size:
            await self._send_partition(part)

    async def send_event(self, event: dict[str, Any], key: bytes) -> None:
        """Queue one event given as a dict."""
        await self.send_raw(orjson.dumps(event), key)

    async def _send_partition(self, part: int) -> None:
        lines = self._buffers.pop(part, [])
        self._sizes.pop(part, None)
        if not lines:
            return
        fut = await self.producer.send(self.topic, pack(lines), key=self._keys.pop(part), partition=part)
        self._inflight.append(fut)
        self.sent_events += len(lines)
        self.sent_messages += 1
        if len(self._inflight) >= 1000:
            await self._drain()

    async def _drain(self) -> None:
        inflight, self._inflight = self._inflight, []
        await asyncio.gather(*inflight)

    async def flush(self) -> None:
        """Send all buffered events and wait until the broker acknowledged them."""
        for part in list(self._buffers):
            await self._send_partition(part)
        await self._drain()


async def send_lines(
    settings: Settings, topic: str, lines: Iterable[tuple[bytes, bytes | None]], pack_size: int | None = None
) -> int:
    """Send already encoded events with their partition keys, packed; returns the events sent."""
    async with EventProducer(settings, topic, pack_size) as p:
        for line, key in lines:
            await p.send_raw(line, key)
    return p.sent_events


@dataclass
class ProduceSummary:
    """What ``produce`` did: events sent, lines refused (by reason, with the first few)."""

    sent: int = 0
    messages: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def refuse(self, r: Refused) -> None:
        """Count one refused line, keeping the first 20 as examples."""
        self.refused[r.reason] = self.refused.get(r.reason, 0) + 1
        if len(self.examples) < 20:
            self.examples.append(f"{r.source}:{r.line_no}: {r.reason}: {r.detail}")

    def text(self) -> str:
        """Human summary."""
        rate = self.sent / self.seconds if self.seconds else 0.0
        lines = [
            f"sent {self.sent} events in {self.messages} messages ({self.seconds:.1f}s, {rate:,.0f} events/s)"
        ]
        total = sum(self.refused.values())
        lines.append(
            f"rejected {total} lines"
            + (": " + ", ".join(f"{k}={v}" for k, v in sorted(self.refused.items())) if total else "")
        )
        lines.extend(f"  {e}" for e in self.examples)
        if self.skipped:
            lines.append(
                "skipped (valid, not events by definition): "
                + ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items()))
            )
        return "\n".join(lines)


async def produce_records(
    settings: Settings, topic: str, records: Iterable[Record], pack_size: int | None = None
) -> ProduceSummary:
    """Send accepted records packed, count refused ones."""
    summary = ProduceSummary()
    started = time.monotonic()
    async with EventProducer(settings, topic, pack_size) as p:
        for rec in records:
            if isinstance(rec, Skipped):
                summary.skipped[rec.reason] = summary.skipped.get(rec.reason, 0) + 1
            elif isinstance(rec, Refused):
                summary.refuse(rec)
            else:
                await p.send_raw(rec.raw, rec.key)
    summary.sent, summary.messages = p.sent_events, p.sent_messages
    summary.seconds = time.monotonic() - started
    return summary


def with_progress(records: Iterable[Record]) -> Iterator[Record]:
    """Progress bar (on a terminal) counted in lines of the input files."""
    from tqdm import tqdm

    with tqdm(unit=" lines", unit_scale=True, disable=None, desc="producing", mininterval=0.5) as bar:
        for rec in records:
            bar.update(1)
            yield rec
