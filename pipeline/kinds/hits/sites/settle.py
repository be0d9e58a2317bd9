"""Periods a worker wrote, acted on once they settle: the loop that top pages' seals and visitor
folds share.

A flush tells which site days and months it wrote (:meth:`Settler.touched`). Once a period
has gone :attr:`Settler.settle` seconds without a write from this worker, or every
:attr:`Settler.open_every` seconds while it is written without pause (0: never while open),
the action runs on it (while the stream is busy, writing a commit or catching up a backlog,
:attr:`Settler.held`, only every :data:`HELD_EVERY` seconds, and a run under way stops
acting on the others). An action answers an outcome: ``"moving"`` (documents still being
written elsewhere, a write conflict) is tried again later, a bounded number of times; any
other outcome is final until the period's next write brings it back. Memory is bounded: past
:data:`MAX_WAITING` periods the oldest are forgotten (their documents stay as written).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric
from pymongo.errors import PyMongoError

from pipeline.kinds.hits.sites.caps import Period

log = logging.getLogger("preagg.settle")

#: Seconds between two looks at the periods waiting.
EVERY = 1.0
#: Periods a worker remembers; past it the oldest are forgotten.
MAX_WAITING = 100_000
#: Tries of one period that keeps answering ``"moving"``.
MAX_TRIES = 20
#: While :attr:`Settler.held`, seconds between two actions on a period written meanwhile.
HELD_EVERY = 300.0

#: What an action did with a period: ``"moving"`` is tried again.
Action = Callable[[Period], Awaitable[str]]


@dataclass
class _Waiting:
    touched: float
    #: When it was first written since the last try: a period written without pause (a
    #: live site's day) is acted on every ``open_every`` seconds all the same.
    since: float = 0.0
    tries: int = 0


class Settler:
    """A worker's periods waiting for ``action``, and the loop that runs it once they settle."""

    def __init__(
        self,
        action: Action,
        what: str,
        settle: float,
        open_every: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.action, self.what = action, what
        self.settle, self.open_every, self.clock, self.sleep = settle, open_every, clock, sleep
        self._waiting: OrderedDict[Period, _Waiting] = OrderedDict()
        #: Outcomes, and ``forgotten``, ``gave_up``, ``failed``.
        self.counts: Counter[str] = Counter()
        #: Set while the stream is busy (writing a commit, catching up a backlog): a period is
        #: then due every :data:`HELD_EVERY` seconds only, not once it settles. A backlog's
        #: commits follow each other, so each period "settled" after one and was acted on while
        #: the next wrote its documents again (on a store that serves one request at a time,
        #: each delaying the other).
        self.held = False

    def touched(self, days: Iterable[tuple[str, int]], months: Iterable[tuple[str, int]]) -> None:
        """A flush wrote these periods: act on them once they settle."""
        now = self.clock()
        for period in [(s, "d", o) for s, o in days] + [(s, "m", o) for s, o in months]:
            old = self._waiting.pop(period, None)
            self._waiting[period] = _Waiting(now, old.since if old is not None else now)
        while len(self._waiting) > MAX_WAITING:
            self._waiting.popitem(last=False)
            self.counts["forgotten"] += 1

    def due(self) -> list[Period]:
        """Periods not written for ``settle`` seconds, or written for ``open_every`` without pause;
        while :attr:`held`, written for :data:`HELD_EVERY` without pause."""
        now = self.clock()
        return [p for p, w in self._waiting.items() if self._due(w, now)]

    def _due(self, w: _Waiting, now: float) -> bool:
        if self.held:
            return w.since <= now - max(self.open_every, HELD_EVERY)
        still_open = now - self.open_every if self.open_every > 0 else -1.0
        return w.touched <= now - self.settle or w.since <= still_open

    async def run_once(self) -> None:
        """Act on every due period; one still moving is tried again later, a bounded number of times.

        A period found due is looked at again just before its action: the stream may have become
        busy meanwhile (a commit, a backlog), and its commits come first.
        """
        for period in self.due():
            waiting = self._waiting.get(period)
            if waiting is not None and self.held and not self._due(waiting, self.clock()):
                continue  # left waiting: acted on once the stream is no longer busy
            live = waiting is not None and waiting.touched > self.clock() - self.settle
            try:
                outcome = await self.action(period)
            except PyMongoError as exc:
                log.warning("%s of %s not done yet (%s); tried again", self.what, period, exc)
                outcome = "moving"
            self.counts[outcome] += 1
            if waiting is None or self._waiting.get(period) is not waiting:
                continue
            if outcome != "moving":
                del self._waiting[period]  # a live period's next write brings it back
            elif live:
                waiting.since = self.clock()  # still written: tried again open_every seconds on
            elif waiting.tries + 1 >= MAX_TRIES:
                del self._waiting[period]
                self.counts["gave_up"] += 1
                log.info("%s of %s left as written: its documents kept moving", self.what, period)
            else:
                waiting.tries += 1
                waiting.touched = waiting.since = self.clock()
                self._waiting.move_to_end(period)

    def metric(self, name: str, text: str) -> Metric:
        """The outcomes so far as one Prometheus counter ``<name>_total{outcome}``."""
        m = CounterMetricFamily(name, text, labels=["outcome"])
        for outcome, n in sorted(self.counts.items()):
            m.add_metric([outcome], n)
        return m

    async def forever(self) -> None:
        """The worker's loop (cancelled when it stops); a failure is logged, the loop goes on."""
        while True:
            await self.sleep(EVERY)
            try:
                await self.run_once()
            except Exception:  # a bug here must not stop the worker: the documents stay as written
                self.counts["failed"] += 1
                log.exception("%s failed; tried again in %.0f s", self.what, EVERY)
