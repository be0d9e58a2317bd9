"""The worker's flush loop: every stream's flush on a fixed cadence, a sealed batch at once.

Not a Faust timer: Faust cancels its timers when it stops, before it waits for every
delivered message to be acked; this loop outlives that wait and flushes the last batch,
so SIGTERM and rebalances end with everything committed. Faust's ``on_before_shutdown``
(every delivered message acked) ends it: left running, the exit waited for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, cast

import faust

from pipeline.worker.backlog import BACKLOG_MESSAGES, behind
from pipeline.worker.flusher import Flusher


class FlushLoop:
    """Flushes start every ``interval`` seconds counted from start to start; a stream far behind
    its partitions' ends lets its batch grow (one write per document) up to ``backlog_interval``."""

    def __init__(
        self,
        flushers: Sequence[Flusher[Any]],
        topics: Sequence[str],
        interval: float,
        backlog_interval: float,
        consumer: Callable[[], Any],
    ) -> None:
        self.flushers, self.topics = flushers, topics
        self.interval, self.backlog_interval = interval, backlog_interval
        #: Per flusher, its stream's own interval where it has one (a stage that flushes less).
        self.intervals: dict[int, float] = {}
        self.consumer = consumer
        #: One per schedule: set when a batch is sealed at its commit bound (:meth:`seal`).
        self._wakers: list[asyncio.Event] = []
        #: A schedule per flusher (a kind's documents flushed apart), else one for all.
        self.apart = False
        #: Unread partitions found at their end (backlog.behind); cleared at each assignment.
        self.settled: set[tuple[str, int]] = set()
        self._task: asyncio.Task[None] | None = None

    def seal(self) -> None:
        """A batch was sealed at its commit bound: every schedule commits its sealed batches at once."""
        for waker in self._wakers:
            waker.set()

    def install(self, app: faust.App) -> None:
        """Start with the app, end once Faust has every delivered message acked."""

        async def start() -> None:
            self._task = asyncio.get_running_loop().create_task(self.forever())

        async def stop(sender: Any, **_: Any) -> None:
            if self._task is not None:
                self._task.cancel()

        app.task(start)
        app.on_before_shutdown.connect(cast(Any, stop))

    async def catching_up(self, f: Flusher[Any], topic: str) -> bool:
        """Far behind the partitions' ends with a young batch: not worth a flush yet."""
        if self.backlog_interval <= 0 or f.batch_age() >= self.backlog_interval:
            return False
        return await behind(self.consumer(), topic, f.consumed, self.settled) > BACKLOG_MESSAGES

    async def forever(self) -> None:
        """The flushers one after another on one schedule; with a family of documents flushed
        apart (:attr:`apart`), one schedule per flusher, so that a slow commit (the pages of a
        busy site) never holds another's flushes (its site rollups); a flusher with an interval
        of its own (:attr:`intervals`) always on a schedule of its own."""
        pairs = list(zip(self.flushers, self.topics, strict=True))
        own = [(f, t) for f, t in pairs if id(f) in self.intervals]
        shared = [(f, t) for f, t in pairs if id(f) not in self.intervals]
        schedules = [self.schedule([f], [t], self.intervals[id(f)]) for f, t in own]
        if self.apart:
            schedules.extend(self.schedule([f], [t]) for f, t in shared)
        elif shared:
            schedules.append(self.schedule([f for f, _ in shared], [t for _, t in shared]))
        await asyncio.gather(*schedules)

    async def schedule(
        self, flushers: Sequence[Flusher[Any]], topics: Sequence[str], interval: float | None = None
    ) -> None:
        # Counted from start to start: waiting a full interval after a slow flush ended would
        # add the flush's duration to every event's wait (freshness). A flush longer than the
        # interval is followed at once by the next, never by a queue of missed ones.
        every = self.interval if interval is None else interval
        loop = asyncio.get_running_loop()
        sealed = asyncio.Event()
        self._wakers.append(sealed)
        next_at = loop.time() + every
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sealed.wait(), max(0.0, next_at - loop.time()))
            sealed.clear()
            if loop.time() < next_at:
                for f in flushers:
                    await f.run_flush(sealed_only=True)
                continue
            for f, topic in zip(flushers, topics, strict=True):
                f.deferring = await self.catching_up(f, topic)
                await f.run_flush(sealed_only=f.deferring)
            next_at = max(next_at + every, loop.time())
