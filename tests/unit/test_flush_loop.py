"""A stream with a flush interval of its own (the visits stage, whose every flush saves its whole
state) is flushed on a schedule of its own; the others keep the worker's (pure: flushers are
stand-ins that count their flushes)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from pipeline.worker.flush_loop import FlushLoop
from pipeline.worker.flusher import Flusher


class Counting:
    def __init__(self) -> None:
        self.flushes = 0
        self.deferring = False

    async def run_flush(self, sealed_only: bool = False) -> None:
        if not sealed_only:
            self.flushes += 1


def test_a_flusher_with_its_own_interval_keeps_it_and_the_others_keep_theirs() -> None:
    fast, other, slow = Counting(), Counting(), Counting()
    flushers = cast(list[Flusher[Any]], [fast, other, slow])
    loop = FlushLoop(flushers, ["hits", "impressions", "hits-visits"], 0.01, 0.0, lambda: None)
    loop.intervals[id(slow)] = 3600.0

    async def run() -> None:
        task = asyncio.get_running_loop().create_task(loop.forever())
        for _ in range(60_000):  # until the shared schedule flushed a few times, however slow
            if fast.flushes >= 3 and other.flushes >= 3:
                break
            await asyncio.sleep(0.005)
        task.cancel()

    asyncio.run(run())
    assert fast.flushes >= 3 and other.flushes >= 3 and slow.flushes == 0
