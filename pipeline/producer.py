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
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from pipeline.core.envelope import pack
from pipeline.files import Record, Refused, Skipped
from pipeline.kafka import ensure_topics, partition_for
from pipeline.security import kafka_client_kwargs
from pipeline.settings import Settings


class EventProducer:
    """Buffers encoded events per partition and sends them packed."""

    def __init__(self, settings: Settings, topic: str, pack_size: int | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self.pack_size = max(1, pack_size if pack_size is not None else settings.pack_size)
        self._producer = AIOKafkaProducer(
            **kafka_client_kwargs(settings),
            acks="all",
            linger_ms=5,
            max_batch_size=1 << 20,
            max_request_size=8 << 20,
            compression_type=None,
        )
        self._buffers: dict[int, list[bytes]] = {}
        self._keys: dict[int, bytes] = {}
        self._inflight: list[asyncio.Future[Any]] = []
        self._partitions = settings.partitions
        self.sent_events = 0
        self.sent_messages = 0

    async def start(self) -> None:
        """Connect, create the topic if missing, learn its partition count."""
        await ensure_topics(self.settings, self.topic)
        await self._producer.start()
        parts = await self._producer.partitions_for(self.topic)
        self._partitions = len(parts)

    async def stop(self) -> None:
        """Send what is buffered, wait for the broker's acks, disconnect."""
        try:
            await self.flush()
        finally:
            await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def send_raw(self, line: bytes, key: bytes) -> None:
        """Queue one already encoded event (one line, no newline inside)."""
        if b"\n" in line:
            raise ValueError("an event line must not contain a newline")
        part = partition_for(key, self._partitions)
        buf = self._buffers.setdefault(part, [])
        if not buf:
            self._keys[part] = key
        buf.append(line)
        if len(buf) >= self.pack_size:
            await self._send_partition(part)

    async def send_event(self, event: dict[str, Any], key: bytes) -> None:
        """Queue one event given as a dict."""
        await self.send_raw(orjson.dumps(event), key)

    async def _send_partition(self, part: int) -> None:
        lines = self._buffers.pop(part, [])
        if not lines:
            return
        fut = await self._producer.send(self.topic, pack(lines), key=self._keys.pop(part), partition=part)
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
    settings: Settings, topic: str, lines: Iterable[tuple[bytes, bytes]], pack_size: int | None = None
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
