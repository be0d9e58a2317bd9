"""Reading one partition outside the consumer group: its bounds and the record at an offset.

Workers use it to check that a partition is the one their ledger describes
(:mod:`pipeline.core.incarnation`) and whether a gap in offsets is Kafka's own
(transaction markers, compaction); ``preagg positions`` uses it to show and reset
positions. Reads are ``read_committed``, like the workers' consumers. The log's end
is taken from a fetch's high watermark: the embedded broker answers ListOffsets
(latest) one batch short, and on real Kafka the two agree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.structs import OffsetAndMetadata

from pipeline.core.envelope import unpack
from pipeline.core.incarnation import Probe, digest
from pipeline.kafka.options import KafkaConnection


async def start_or_close(consumer: AIOKafkaConsumer) -> AIOKafkaConsumer:
    """Start ``consumer``; one that fails to start is closed before the error goes on (else
    aiokafka prints "Unclosed AIOKafkaConsumer" after the command's own one-line error)."""
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise
    return consumer


def groupless_consumer(conn: KafkaConnection, reset: str = "none") -> AIOKafkaConsumer:
    """A consumer outside any group, committing nothing, reading committed records only."""
    return AIOKafkaConsumer(
        **conn.client_kwargs(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset=reset,
        isolation_level="read_committed",
    )


def group_consumer(conn: KafkaConnection, group: str) -> AIOKafkaConsumer:
    """A consumer that speaks for ``group`` without joining it: reads and commits its offsets."""
    return AIOKafkaConsumer(**conn.client_kwargs(), group_id=group, enable_auto_commit=False)


async def group_positions(
    conn: KafkaConnection, group: str, tps: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int | None, int]]:
    """Per partition, ``group``'s committed offset in Kafka (``None``: none) and the log's first offset."""
    if not tps:
        return {}
    c = await start_or_close(group_consumer(conn, group))
    try:
        parts = [TopicPartition(t, p) for t, p in tps]
        starts = await c.beginning_offsets(parts)
        return {(tp.topic, tp.partition): (await c.committed(tp), starts[tp]) for tp in parts}
    finally:
        await c.stop()


async def commit_group_offsets(
    conn: KafkaConnection, group: str, offsets: Mapping[tuple[str, int], int]
) -> None:
    """Commit ``offsets`` for ``group`` from outside it. Kafka takes such a commit only while no member
    is in the group (an active group refuses it: its members' commits follow the ledgers then)."""
    if not offsets:
        return
    c = await start_or_close(group_consumer(conn, group))
    try:
        parts = {TopicPartition(t, p): n for (t, p), n in offsets.items()}
        c.assign(list(parts))
        await c.commit({tp: OffsetAndMetadata(n, "") for tp, n in parts.items()})
    finally:
        await c.stop()


async def topic_partitions(c: AIOKafkaConsumer, topic: str) -> list[int]:
    """The partitions Kafka has for ``topic`` (empty when it does not exist), metadata refreshed once.

    A consumer that was assigned partitions refreshes the metadata of their topics only, so a
    topic it never read is then asked for with every topic's metadata."""
    parts = c.partitions_for_topic(topic)
    if parts is None:
        await c._client.force_metadata_update()
        parts = c.partitions_for_topic(topic)
    if parts is None:
        parts = (await c._client.fetch_all_metadata()).partitions_for_topic(topic)
    return sorted(parts or ())


async def read_to_end(
    c: AIOKafkaConsumer,
    starts: Mapping[TopicPartition, int | None],
    on_record: Callable[[TopicPartition, ConsumerRecord[bytes, bytes]], None],
    timeout: float,
    idle: float | None = None,
) -> tuple[dict[TopicPartition, int], bool]:
    """Feed ``on_record`` every record from ``starts`` (``None``: the beginning) to each partition's end.

    A partition is read when its position reaches the fetch's high watermark (or, with
    ``idle``, after that many seconds without a record anywhere). Returns the positions
    reached and whether every partition was read within ``timeout``.
    """
    c.assign(list(starts))
    for tp, n in starts.items():
        if n is None:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, n)
    done: set[TopicPartition] = set()
    positions: dict[TopicPartition, int] = {}
    deadline = idle_since = time.monotonic()
    deadline += timeout
    while len(done) < len(starts) and time.monotonic() < deadline:
        got = await c.getmany(timeout_ms=500, max_records=5000)
        if got:
            idle_since = time.monotonic()
        for tp, recs in got.items():
            for r in recs:
                on_record(tp, r)
        for tp in starts:
            hw, positions[tp] = c.highwater(tp), await c.position(tp)
            if (hw is not None and positions[tp] >= hw) or (
                idle is not None and time.monotonic() - idle_since > idle
            ):
                done.add(tp)
    return positions, len(done) == len(starts)


class PartitionProbe:
    """One group-less consumer, started on first use, reused for every look (one at a time)."""

    def __init__(self, conn: KafkaConnection, timeout: float = 10.0) -> None:
        self.conn = conn
        self.timeout = timeout
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = await start_or_close(groupless_consumer(self.conn))
            self._consumer = consumer
        return self._consumer

    async def close(self) -> None:
        """Disconnect (a later look connects again)."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()

    async def __aenter__(self) -> PartitionProbe:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def partitions(self, topic: str) -> list[int]:
        """The partitions Kafka has for ``topic`` (empty when the topic does not exist)."""
        async with self._lock, asyncio.timeout(self.timeout):
            return await topic_partitions(await self._started(), topic)

    async def look(self, topic: str, partition: int, offset: int) -> Probe:
        """The first record at or after ``offset``, and the partition's bounds."""
        async with self._lock, asyncio.timeout(self.timeout):
            c = await self._started()
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            start = (await c.beginning_offsets([tp]))[tp]
            listed_end = (await c.end_offsets([tp]))[tp]
            c.seek(tp, max(offset, start))
            try:
                return await self._first(c, tp, start, listed_end)
            except OffsetOutOfRangeError:
                # ``offset`` is past the log's end: read from the start to learn where it ends.
                c.seek(tp, start)
                end = await self._high_watermark(c, tp, listed_end)
                return Probe(None, start, end)

    async def log_start(self, topic: str, partition: int) -> int:
        """The partition's first offset Kafka still holds (retention moves it)."""
        async with self._lock, asyncio.timeout(self.timeout):
            c = await self._started()
            tp = TopicPartition(topic, partition)
            return int((await c.beginning_offsets([tp]))[tp])

    async def read_range(
        self, topic: str, partition: int, start: int | None, end: int, timeout: float = 120.0
    ) -> list[tuple[int, bytes | None, int]]:
        """The records ``[start, end)`` of one partition (``start`` ``None``: from the log's beginning).

        ``(offset, value, timestamp ms)`` each, committed records only. Offsets are not
        contiguous (transaction markers, compaction), so the read ends at the first offset
        at or past ``end``, or at the partition's end when the range's last records are
        gone; a read that cannot get there within ``timeout`` is an error (retried).
        """
        async with self._lock, asyncio.timeout(timeout):
            c = await self._started()
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            first = (await c.beginning_offsets([tp]))[tp]
            c.seek(tp, first if start is None else max(start, first))
            out: list[tuple[int, bytes | None, int]] = []
            while True:
                got = await c.getmany(tp, timeout_ms=300, max_records=5000)
                for r in got.get(tp, []):
                    if r.offset >= end:
                        return out
                    out.append((r.offset, r.value, max(r.timestamp, 0)))
                position = await c.position(tp)
                hw = c.highwater(tp)
                if position >= end or (hw is not None and position >= hw):
                    return out

    async def _first(self, c: AIOKafkaConsumer, tp: TopicPartition, start: int, listed_end: int) -> Probe:
        deadline = time.monotonic() + self.timeout / 2
        while True:
            got = await c.getmany(tp, timeout_ms=300, max_records=1)
            records = got.get(tp, [])
            end = max(c.highwater(tp) or 0, listed_end)
            if records:
                r = records[0]
                return Probe((r.offset, r.timestamp, digest(list(unpack(r.value or b"")))), start, end)
            if c.highwater(tp) is not None and await c.position(tp) >= end:
                return Probe(None, start, end)
            if time.monotonic() > deadline:
                # Not "no record there": the read did not get that far. Guessing either way
                # is wrong (a gap taken for records in between restarted the worker in a
                # loop), so it is an error the caller retries, logs and counts.
                raise TimeoutError(
                    f"{tp.topic}[{tp.partition}]: no record read within {self.timeout / 2:.0f}s"
                )

    async def _high_watermark(self, c: AIOKafkaConsumer, tp: TopicPartition, listed_end: int) -> int:
        deadline = time.monotonic() + self.timeout / 2
        while c.highwater(tp) is None and time.monotonic() < deadline:
            await c.getmany(tp, timeout_ms=300, max_records=1)
        return max(c.highwater(tp) or 0, listed_end)
