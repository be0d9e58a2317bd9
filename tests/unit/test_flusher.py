"""Flush ordering without servers: dead letters, then the write, then acks; failures keep the batch."""

import asyncio
from collections.abc import Sequence

from pipeline.aggregate.hits import HitCounts
from pipeline.aggregate.updates import DocUpdate
from pipeline.ingest.hits import HitDecoder
from pipeline.schemas import hits_fields
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.flusher import Flusher


def make(fail_writes: int = 0) -> tuple[Flusher[HitCounts], list[str]]:
    log: list[str] = []
    failures = [fail_writes]

    async def write(plan: Sequence[DocUpdate]) -> int:
        if failures[0] > 0:
            failures[0] -= 1
            log.append("write-failed")
            raise ConnectionError("store down")
        log.append(f"write:{len(plan)}")
        return len(plan)

    async def send_dead(letters: Sequence[DeadLetter]) -> None:
        log.append(f"dead:{len(letters)}")

    async def ack(handle: object) -> None:
        log.append(f"ack:{handle}")

    dec = HitDecoder(1000, 300, clock=lambda: 2e9)
    f: Flusher[HitCounts] = Flusher(
        "hits",
        lambda: HitCounts(dec, hits_fields()),
        write,
        send_dead,
        ack,
        "w1",
        max_pending_keys=2,
        max_backoff=0.01,
    )
    return f, log


def test_order_is_deadletters_write_then_ack() -> None:
    f, log = make()
    f.ingest(("hits", 0), 10, b'{"site":"s","page":"/","ts":1}\nbad', "m10")
    f.ingest(("hits", 0), 11, b'{"site":"s","page":"/","ts":2}', "m11")
    assert f.batch.offsets == {("hits", 0): (10, 11)}
    asyncio.run(f.flush())
    assert log[0] == "dead:1"
    assert log[1].startswith("write:")
    assert log[2:] == ["ack:m10", "ack:m11"]
    assert f.stats.events == 3 and f.stats.rejected == {"invalid_json": 1}
    asyncio.run(f.flush())  # nothing pending: no write
    assert len(log) == 4


def test_failed_write_is_retried_and_nothing_acked_before_success() -> None:
    f, log = make(fail_writes=2)
    f.ingest(("hits", 1), 5, b'{"site":"s","page":"/","ts":1}', "m5")
    asyncio.run(f.flush())
    assert log == ["write-failed", "write-failed", "write:3", "ack:m5"]
    assert f.stats.retries == 2


def test_should_flush_at_key_bound() -> None:
    f, _ = make()
    f.ingest(("hits", 0), 1, b'{"site":"s","page":"/a","ts":1}', "a")
    assert not f.should_flush()
    f.ingest(("hits", 0), 2, b'{"site":"s","page":"/b","ts":1}', "b")
    assert f.should_flush()
