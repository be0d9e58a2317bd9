"""Retention run by the workers themselves: once per interval for the whole group.

``PREAGG_HITS_RETENTION_EVERY`` hours apart, one worker of the group runs what
``preagg retention run`` runs (:func:`pipeline.kinds.hits.sites.prune.run_retention`),
sparing what was written within its tier: a backfill of old logs is not an operator's
decision to drop its minutes.
Which one: the first to *claim* the interval, a conditional upsert on one
``preagg_meta`` document (``{_id: "hits_retention_schedule", started}``). The claim
succeeds only if the last run started an interval ago or more; two workers claiming
at once collide on ``_id`` and one of them gets a duplicate-key error, so one run
per interval whatever the number of replicas or restarts. A worker never runs one
in its first minutes (``min(every, 15 min)``), so a short-lived worker (a test, a
benchmark, a crash loop) never prunes. A run that fails or is cut short is logged
and counted; the next interval's run finishes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from pipeline.kinds.hits.layout import HitsFields
from pipeline.kinds.hits.sites.fold import fold_pending
from pipeline.kinds.hits.sites.prune import PruneResult, run_retention
from pipeline.kinds.hits.sites.tiers import SETTLE_SECONDS, Tiers, utc_today
from pipeline.store.meta import META_COLLECTION

log = logging.getLogger("preagg.retention")

SCHEDULE_ID = "hits_retention_schedule"
#: A worker's first run comes this long after it starts at the earliest (or ``every``, if shorter).
FIRST_DELAY = 900.0


async def claim(db: AsyncDatabase[dict[str, Any]], every: float, now: float, worker: str) -> bool:
    """Whether this worker runs the interval's retention: no run started in the last ``every`` s."""
    try:
        await db[META_COLLECTION].update_one(
            {"_id": SCHEDULE_ID, "started": {"$lte": now - every}},
            {"$set": {"started": now, "by": worker}},
            upsert=True,
        )
    except DuplicateKeyError:
        return False  # a run started less than an interval ago (or another worker just claimed)
    return True


async def next_due(db: AsyncDatabase[dict[str, Any]], every: float) -> float:
    """When the group's next run is due (epoch seconds): an interval after the last start."""
    doc = await db[META_COLLECTION].find_one({"_id": SCHEDULE_ID}) or {}
    return float(doc.get("started") or 0.0) + every


class RetentionSchedule:
    """A worker's loop that claims and runs the periodic retention; counts what happened."""

    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        fields: HitsFields,
        tiers: Tiers,
        every_hours: float,
        worker: str,
        settle: float = SETTLE_SECONDS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.db, self.fields, self.tiers, self.worker = db, fields, tiers, worker
        self.every, self.settle = every_hours * 3600.0, settle
        self.clock, self.sleep = clock, sleep
        #: Runs this worker finished, and failed (each logged).
        self.runs = 0
        self.failures = 0
        self.documents = 0
        #: Past site rollups whose visitor registers the runs folded (a worker stopped before it did).
        self.folds = 0

    async def forever(self) -> None:
        """Sleep until a run is due, claim it, run it; again. Never returns (cancelled at stop)."""
        earliest = self.clock() + min(self.every, FIRST_DELAY)
        while True:
            try:
                due = max(earliest, await next_due(self.db, self.every))
                await self.sleep(max(0.0, due - self.clock()))
                if await claim(self.db, self.every, self.clock(), self.worker):
                    await self.run_once()
            except (PyMongoError, TimeoutError) as exc:
                self.failures += 1
                log.warning(
                    "periodic retention failed (%s: %s): tried again in a minute", type(exc).__name__, exc
                )
                await self.sleep(60.0)

    async def run_once(self) -> list[PruneResult]:
        """One run, recorded in the schedule document (``last``) for ``preagg retention run``."""
        t0, started = time.monotonic(), self.clock()
        today = utc_today()
        done = await run_retention(
            self.db, self.fields, self.tiers, today, settle=self.settle, spare_recent=True
        )
        folds = await fold_pending(self.db, self.fields, today)
        self.folds += folds
        self.runs += 1
        self.documents += sum(p.documents for p in done)
        await self.db[META_COLLECTION].update_one(
            {"_id": SCHEDULE_ID},
            {
                "$set": {
                    "last": {
                        "started": started,
                        "finished": self.clock(),
                        "by": self.worker,
                        "pruned": {p.what: p.documents for p in done},
                    }
                }
            },
        )
        log.info(
            "periodic retention: %s; visitor registers of %d past site rollups folded; in %.1f s",
            "; ".join(f"{p.what}: {p.documents} documents" for p in done) or "every tier is forever",
            folds,
            time.monotonic() - t0,
        )
        return done


def retention_metrics(schedule: RetentionSchedule) -> Iterator[Metric]:
    """This worker's periodic retention runs, failures, and daily documents pruned."""
    runs = CounterMetricFamily("preagg_retention_runs", "Periodic retention runs this worker finished")
    runs.add_metric([], schedule.runs)
    failed = CounterMetricFamily("preagg_retention_failures", "Periodic retention runs that failed (retried)")
    failed.add_metric([], schedule.failures)
    docs = CounterMetricFamily("preagg_retention_documents", "Daily documents the periodic runs pruned")
    docs.add_metric([], schedule.documents)
    yield from (runs, failed, docs)
