"""Whether a stream is behind its partitions' ends, counting partitions that delivered nothing yet."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, NamedTuple

from aiokafka.errors import KafkaConnectionError

from pipeline.worker.backlog import BACKLOG_MESSAGES, behind


class TP(NamedTuple):
    topic: str
    partition: int


class Consumer:
    """Faust's consumer as the flush loop sees it: ends known only for partitions fetched."""

    def __init__(
        self, ends: dict[TP, int], fetched: set[TP], positions: dict[TP, int], fail: bool = False
    ) -> None:
        self.ends, self.fetched, self.positions, self.fail = ends, fetched, positions, fail
        self.asked: list[TP] = []

    def assignment(self) -> set[TP]:
        return set(self.ends)

    def highwater(self, tp: TP) -> int | None:
        return self.ends[tp] if tp in self.fetched else None

    async def highwaters(self, *partitions: Any) -> Mapping[Any, int]:
        if self.fail:
            raise KafkaConnectionError("broker away")
        self.asked.extend(partitions)
        return {tp: self.ends[tp] for tp in partitions}

    async def position(self, tp: Any) -> int | None:
        return self.positions.get(tp)


def test_partitions_not_read_yet_count_their_backlog() -> None:
    """One partition read to its end while three have delivered nothing: still 3 × 60,000 behind
    (before, 0: the batch of one partition was flushed alone)."""
    tps = [TP("hits", p) for p in range(4)]
    c = Consumer({tp: 60_000 for tp in tps}, {tps[0]}, {tp: 0 for tp in tps[1:]})
    got = asyncio.run(behind(c, "hits", {("hits", 0): 60_000}))
    assert got == 180_000 and set(c.asked) == set(tps[1:])


def test_far_behind_already_asks_nothing_and_other_topics_are_not_counted() -> None:
    a, b, other = TP("hits", 0), TP("hits", 1), TP("listens", 0)
    c = Consumer({a: 50_000, b: 9_000, other: 10**6}, {a}, {b: 0, other: 0})
    assert asyncio.run(behind(c, "hits", {("hits", 0): 10})) == 49_990
    assert c.asked == []


def test_caught_up_partitions_and_a_failed_question_do_not_hold_a_flush() -> None:
    a, b = TP("hits", 0), TP("hits", 1)
    idle = Consumer({a: 500, b: 7_000}, {a}, {b: 7_000})  # b delivered nothing: it has nothing new
    assert asyncio.run(behind(idle, "hits", {("hits", 0): 500})) == 0
    away = Consumer({a: 500, b: 7_000}, {a}, {b: 0}, fail=True)
    assert asyncio.run(behind(away, "hits", {("hits", 0): 500})) <= BACKLOG_MESSAGES


def test_an_idle_partition_found_at_its_end_is_not_asked_again() -> None:
    a, b = TP("hits", 0), TP("hits", 1)
    idle = Consumer({a: 500, b: 7_000}, {a}, {b: 7_000})
    settled: set[tuple[str, int]] = set()
    for _ in range(3):
        assert asyncio.run(behind(idle, "hits", {("hits", 0): 500}, settled)) == 0
    assert idle.asked == [b] and settled == {("hits", 1)}
