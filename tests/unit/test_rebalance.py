"""The revoke drain's wiring without a broker: what a rebalance does with uncommitted batches."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from pipeline.worker.rebalance import bound_revoke_drain


class FakeFlusher:
    """Holds delivered messages until it flushes (a backlog batch waits to age otherwise)."""

    def __init__(self) -> None:
        self.stream = "hits"
        self.flushed = asyncio.Event()
        self.abandoned = 0

    async def flush(self, sealed_only: bool = False) -> None:
        self.flushed.set()  # the batch commits; its messages are acked

    async def abandon(self) -> int:
        self.abandoned += 1
        return 100

    def release(self) -> dict[tuple[str, int], int]:
        return {}


def test_a_rebalance_commits_at_once_instead_of_waiting_for_the_batch_to_age() -> None:
    """Faust's drain waits for every delivered message's ack. In a backlog the
    batch is written only when `backlog_flush_interval` old, so the drain overran its bound and
    dropped the batch (read again, rewritten: churn). The drain now flushes at once."""

    async def scenario() -> tuple[bool, int]:
        flusher = FakeFlusher()

        async def waits(consumer: Any, logger: Any) -> None:  # Faust: until every message is acked
            await flusher.flushed.wait()

        app = SimpleNamespace(
            _consumer_wait_empty=waits, should_stop=False, conf=SimpleNamespace(stream_wait_empty=True)
        )
        consumer = SimpleNamespace(abandon_unacked=lambda: 0)
        bound_revoke_drain(app, [flusher], bound=5.0)  # type: ignore[arg-type, list-item]
        await asyncio.wait_for(app._consumer_wait_empty(consumer, None), timeout=60)
        return flusher.flushed.is_set(), flusher.abandoned

    flushed, abandoned = asyncio.run(scenario())
    assert flushed and abandoned == 0


def test_lists_let_go_of_are_released_and_the_drain_waits_for_the_others_flush() -> None:
    """A list the pages' reader let go of stood for the rollups' records of it too: released, the
    acks no longer cover those, so the drain waits for the flush itself before the partitions go."""

    async def scenario() -> tuple[list[tuple[str, int, int]], bool]:
        released: list[tuple[str, int, int]] = []

        class LettingGo(FakeFlusher):
            def release(self) -> dict[tuple[str, int], int]:
                return {("hits", 2): 40}

            async def flush(self, sealed_only: bool = False) -> None:
                await asyncio.sleep(0.01)  # the commit takes a while: the drain must not cut it
                self.flushed.set()

        flusher = LettingGo()

        async def waits(consumer: Any, logger: Any) -> None:  # nothing left unacked once released
            return None

        app = SimpleNamespace(
            _consumer_wait_empty=waits, should_stop=False, conf=SimpleNamespace(stream_wait_empty=True)
        )
        consumer = SimpleNamespace(
            abandon_unacked=lambda: 0, release=lambda *tp_start: released.append(tp_start) or 1
        )
        bound_revoke_drain(app, [flusher], bound=60.0)  # type: ignore[arg-type, list-item]
        await asyncio.wait_for(app._consumer_wait_empty(consumer, None), timeout=60)
        return released, flusher.flushed.is_set()

    released, flushed = asyncio.run(scenario())
    assert released == [("hits", 2, 40)] and flushed
