"""A flusher's accounting: running totals for metrics and status, and what each flush logs.

Kept apart from the flush itself so that what is counted (and how it is logged) can be
read in one place: :class:`FlushStats` feeds ``/metrics`` (pipeline/worker/metrics.py)
and ``/health``; :class:`Accounting` adds one committed batch to it, logs the line per
flush (``PREAGG_LOG_FLUSHES``), the first dead letters of a batch, and the upserts that
idempotent writes found applied or raced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.commit import Committed
from pipeline.core.logs import EACH_FLUSH
from pipeline.worker.batch import PendingBatch
from pipeline.worker.deadletter import DeadLetter

log = logging.getLogger("preagg.flush")
each_flush_log = logging.getLogger(EACH_FLUSH)

#: Upper bounds (seconds) of the flush latency histogram.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class FlushStats:
    """Running totals of one flusher, for logs, the ops documents and metrics."""

    events: int = 0
    skipped: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    flushes: int = 0
    replayed_commits: int = 0
    docs: int = 0
    retries: int = 0
    last_flush_seconds: float = 0.0
    last_flush_at: float = 0.0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    backpressure_pauses: int = 0
    backpressure_seconds: float = 0.0
    paused_since: float | None = None
    #: Commit attempts that raised (each one also counts in ``retries`` or led to a split).
    failed_commits: int = 0
    #: Batches split in two after a commit failed for its size or duration.
    splits: int = 0
    #: Failed commits whose outcome was read from the ledgers before splitting.
    unknown_outcomes: int = 0
    #: When the flush running now began (epoch s; ``None``: none running), for ``/health``.
    flush_started_at: float | None = None
    #: Rebalance drains that passed their bound, and the uncommitted events they dropped.
    abandons: int = 0
    abandoned_events: int = 0
    #: Size/time failures of a batch of one message, which cannot be split (retried, logged).
    unsplittable: int = 0
    #: Batches sealed because they reached the commit bound (not by the flush timer).
    sealed: int = 0
    commit_bytes: int = 0
    #: Commits aborted by another transaction's write to the same document (retried, backed off).
    write_conflicts: int = 0
    #: Messages of diverged partitions, not counted (see ``Flusher.diverged``).
    held_back: int = 0
    #: Commit attempts that took the stream's commit token (after write conflicts).
    token_commits: int = 0
    #: Cut-short flushes whose range this worker wrote again (idempotent writes).
    redone: int = 0
    #: Write failures escalated as permanent (see ``PERMANENT_ATTEMPTS``), and events
    #: dead-lettered because the store refused their one-message batch for good.
    permanent_errors: int = 0
    unwritable: int = 0
    #: Idempotent writes: upserts refused with a duplicate key that their documents' marks
    #: showed applied; upserts sent again after another writer's insert; merged upserts
    #: sent again per partition (pipeline/store/idempotent_commit.py, "_marked_writes").
    marks_applied: int = 0
    inserts_raced: int = 0
    shares_split: int = 0

    def observe(self, seconds: float) -> None:
        """Record one flush's latency in the histogram."""
        i = next((i for i, b in enumerate(LATENCY_BUCKETS) if seconds <= b), len(LATENCY_BUCKETS))
        self.latency_counts[i] += 1
        self.latency_sum += seconds


class Accounting:
    """Adds committed batches to one stream's :class:`FlushStats` and logs them."""

    def __init__(self, stream: str, stats: FlushStats) -> None:
        self.stream = stream
        self.stats = stats

    def flushed(
        self,
        batch: PendingBatch[Any],
        rejected: dict[str, int],
        docs: int,
        size: int,
        commit_seconds: float,
        took: float,
    ) -> None:
        """One batch committed and acked: its events, refusals, documents and seconds."""
        s = self.stats
        s.commit_bytes += size
        s.events += batch.events
        s.skipped += batch.skipped
        for reason, n in rejected.items():
            s.rejected[reason] = s.rejected.get(reason, 0) + n
        s.flushes += 1
        s.docs += docs
        s.last_flush_seconds = took
        s.last_flush_at = time.time()
        s.observe(took)
        each_flush_log.info(
            "flushed %s: %d events, %d rejected, %d replayed skipped, %d docs, %d bytes in %.3fs "
            "(commit %.3fs; offsets %s)",
            self.stream,
            batch.events,
            sum(rejected.values()),
            batch.skipped,
            docs,
            size,
            took,
            commit_seconds,
            {f"{t}[{p}]": r for (t, p), r in batch.offsets.items()},
        )

    def marks(self, result: Committed, flush_id: str) -> None:
        """Meter (and log) the upserts an idempotent flush found applied, sent again, or split."""
        s = self.stats
        s.marks_applied += result.applied
        s.inserts_raced += result.raced
        s.shares_split += result.split
        if result.raced or result.split:
            log.info(
                "flush %s: %d upserts met another writer's insert and were sent again, %d merged upserts "
                "were sent again per partition, %d were already applied",
                flush_id,
                result.raced,
                result.split,
                result.applied,
            )

    def dead(self, dead: Sequence[DeadLetter]) -> None:
        """The first dead letters of a batch, one WARNING each (all of them are counted)."""
        for d in dead[:5]:
            log.warning(
                "rejected %s event at %s[%d]@%d line %d: %s",
                self.stream,
                d.topic,
                d.partition,
                d.offset,
                d.line,
                d.rejection.detail,
            )
