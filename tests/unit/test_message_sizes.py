"""Messages fit the broker's limits: packs close below the largest message, dead letters are cut."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest

from pipeline.core.rejection import Rejection
from pipeline.kafka.producer import EventProducer
from pipeline.ops.positions import target
from pipeline.settings import Settings
from pipeline.worker.deadletter import MAX_RAW, DeadLetter


def test_packs_close_before_the_largest_message() -> None:
    p = EventProducer(Settings(max_message_bytes=1000), "t", pack_size=100)
    sent: list[int] = []

    async def send(part: int) -> None:
        lines = p._buffers.pop(part, [])
        p._sizes.pop(part, None)
        if lines:
            sent.append(len(b"\n".join(lines)))

    p._send_partition = send  # type: ignore[method-assign]
    p._partitions = 1

    async def run() -> None:
        for _ in range(50):
            await p.send_raw(b"x" * 99, b"k")
        await p.flush()
        with pytest.raises(ValueError, match="exceeds the largest message"):
            await p.send_raw(b"x" * 1001, b"k")

    asyncio.run(run())
    assert sum(sent) == 50 * 99 + 50 - len(sent) and all(n <= 1000 for n in sent) and len(sent) == 5


def test_a_huge_refused_input_is_dead_lettered_cut_with_its_size_and_digest() -> None:
    raw = b'{"site": "' + b"a" * 3_000_000 + b'"}'
    value = DeadLetter(Rejection("oversize", "too big", raw), "hits", 0, 7, 0).encode("w")
    rec = orjson.loads(value)
    assert len(value) < 2 * MAX_RAW and rec["raw_truncated"] is True
    assert rec["raw_bytes"] == len(raw) and rec["raw_sha256"] == hashlib.sha256(raw).hexdigest()
    assert rec["raw"] == raw[:MAX_RAW].decode()
    small = orjson.loads(DeadLetter(Rejection("schema", "x", b"\xff\xfe"), "hits", 0, 1, 0).encode("w"))
    assert "raw_truncated" not in small and small["raw_b64"] == "//4="


def test_reset_targets_stay_inside_the_log() -> None:
    assert (target("earliest", 5, 90), target("latest", 5, 90), target("40", 5, 90)) == (5, 90, 40)
    with pytest.raises(ValueError, match=r"outside Kafka.s log 5\.\.90"):
        target("3", 5, 90)
