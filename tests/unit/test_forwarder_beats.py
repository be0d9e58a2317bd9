"""A worker whose hits partitions went quiet at their ends tells the visits stage so by a heartbeat
when no flush is coming to say it; once per change, every destination, failures counted (pure:
the sends are recorded, no broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from unittest.mock import Mock

from pipeline.core.visit_hits import Packed, VisitHit, unpack
from pipeline.worker.forwarding import Forwarder
from pipeline.worker.gate import PartitionGate

H = 1_764_000_000.0


class Broker:
    """Records what is sent, per destination partition; fails while ``down``."""

    def __init__(self) -> None:
        self.sent: list[tuple[Packed, int]] = []
        self.down = False

    async def send(self, value: bytes, partition: int) -> Awaitable[object]:
        if self.down:
            raise ConnectionError("broker away")
        got = unpack(value)
        assert isinstance(got, Packed)
        self.sent.append((got, partition))
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def forwarder(broker: Broker, idle: set[int]) -> Forwarder:
    async def three() -> list[int]:
        return [0, 1, 2]

    async def four() -> list[int]:
        return [0, 1, 2, 3]

    f = Forwarder("hits-visits", lambda a: a, broker.send, three, 5.0, "g", read_partitions=four)
    f.source, f.idle = "hits", lambda: set(idle)
    return f


def test_quiet_partitions_are_announced_once_to_every_destination() -> None:
    broker, idle = Broker(), set[int]()
    f = forwarder(broker, idle)

    async def run() -> None:
        await f.beat()
        assert broker.sent == []  # nothing idle
        idle.update({1, 2})
        await f.beat()
        assert sorted(d for _, d in broker.sent) == [0, 1, 2]
        assert all(
            m.beat and m.idle == (1, 2) and m.topic == "g/hits" and m.sources == 4 for m, _ in broker.sent
        )
        await f.beat()
        assert len(broker.sent) == 3  # nothing new to say
        idle.add(3)
        await f.beat()
        assert [m.idle for m, _ in broker.sent[3:]] == [(1, 2, 3)] * 3 and f.beats == 2

    asyncio.run(run())


def test_a_partition_that_sent_hits_since_is_announced_again_when_quiet_again() -> None:
    broker, idle = Broker(), {1, 2}
    f = forwarder(broker, idle)
    f.quiet = lambda _partition: False  # its hits just arrived

    async def run() -> None:
        await f.beat()
        idle.discard(1)
        await f.sent({1: [VisitHit("s", 7, H, "/")]}, {("hits", 1): 5}, idle=sorted(idle))
        flush = [m for m, _ in broker.sent[3:]]
        assert flush and not any(m.beat or m.at_end for m in flush) and f.high == H
        idle.add(1)
        await f.beat()
        assert [m.idle for m, _ in broker.sent if m.beat][-1] == (1, 2)
        assert f.beats == 2

    asyncio.run(run())


def test_a_heartbeat_that_fails_is_counted_and_tried_again() -> None:
    broker, idle = Broker(), {0}
    f = forwarder(broker, idle)

    async def run() -> None:
        broker.down = True
        await f.beat()
        assert (f.beats, f.beat_failures, broker.sent) == (0, 1, [])
        broker.down = False
        await f.beat()
        assert (f.beats, len(broker.sent)) == (1, 3)

    asyncio.run(run())


def test_a_partition_is_quiet_only_once_no_records_arrived_for_the_idle_time() -> None:
    gate = PartitionGate(Mock(), Mock(), None, True)
    assert gate.quiet(("hits", 0), 0.0)
    assert not gate.quiet(("hits", 1), 60.0)  # first asked now: quiet from now on
    gate.heard[("hits", 2)] = 0.0  # records long ago
    assert gate.quiet(("hits", 2), 60.0)
    gate.forget([("hits", 2)])
    assert ("hits", 2) not in gate.heard
