"""Kafka's committed offsets follow the ledgers even when Faust believes a refused commit went through."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from pipeline.core.commit import Ledgers
from pipeline.worker.guard import LedgerGuard


class Consumer:
    def __init__(self, refuse: int = 0) -> None:
        self.commits: list[dict[TP, int]] = []
        self.refuse = refuse

    def assignment(self) -> set[TP]:
        return {TP("impressions", 1), TP("impressions", 3)}

    async def _commit(self, offsets: dict[TP, int]) -> bool:
        if self.refuse:
            self.refuse -= 1
            return False  # IllegalGeneration during a rebalance
        self.commits.append(dict(offsets))
        return True


class Sink:
    def __init__(self) -> None:
        self.positions: dict[tuple[str, int], int | None] = {
            ("impressions", 1): 250,
            ("impressions", 3): None,
        }

    async def ledgers(self, tps: Any) -> Ledgers:
        return Ledgers({tp: self.positions.get(tp) for tp in tps}, {})


def test_the_ledgers_positions_reach_kafka_again_after_a_refused_commit() -> None:
    consumer, sink = Consumer(refuse=1), Sink()
    guard = LedgerGuard(SimpleNamespace(consumer=consumer), sink, None, "w")  # type: ignore[arg-type]

    async def go() -> None:
        await guard._hint_kafka([])  # refused: retried at the next look
        await guard._hint_kafka([])
        await guard._hint_kafka([])  # nothing moved: nothing sent
        sink.positions[("impressions", 1)] = 260
        await guard._hint_kafka([])

    asyncio.run(go())
    assert consumer.commits == [{TP("impressions", 1): 250}, {TP("impressions", 1): 260}]
