"""Prometheus metrics and the health verdict of one worker, read from its flushers on scrape.

A pull collector: nothing is updated on the hot path; every scrape reads the
flushers' :class:`~pipeline.worker.accounting.FlushStats` and the consumer's positions.
No URL, credential or event content is ever a label (security: metrics are often
readable by more people than logs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.core.families import family_of
from pipeline.worker.accounting import LATENCY_BUCKETS
from pipeline.worker.flusher import Flusher
from pipeline.worker.memory import rss_bytes

#: ``(topic, partition) -> messages behind the partition's end`` for assigned partitions.
LagSource = Callable[[], dict[tuple[str, int], int]]

CONTENT_TYPE = "text/plain; version=0.0.4"

#: Per-stream series of the bounded commits: (type, name, help, value of one flusher).
COMMIT_SERIES: list[tuple[str, str, str, Callable[[Flusher[Any]], float]]] = [
    (
        "counter",
        "preagg_commit_failures",
        "Commit attempts that failed (retried or split)",
        lambda f: f.stats.failed_commits,
    ),
    (
        "counter",
        "preagg_commit_splits",
        "Batches split in two after a too-large or too-slow commit",
        lambda f: f.stats.splits,
    ),
    (
        "counter",
        "preagg_commit_unsplittable",
        "Too-large or too-slow commits of a single message, which cannot be split (retried)",
        lambda f: f.stats.unsplittable,
    ),
    (
        "counter",
        "preagg_batches_sealed",
        "Batches sealed at the commit bound, not by the timer",
        lambda f: f.stats.sealed,
    ),
    (
        "counter",
        "preagg_commit_bytes",
        "BSON bytes of update statements committed",
        lambda f: f.stats.commit_bytes,
    ),
    (
        "gauge",
        "preagg_commit_docs_limit",
        "Documents at which a batch is sealed now (adapts to commit time)",
        lambda f: f.bound.docs_limit,
    ),
    (
        "gauge",
        "preagg_partitions_diverged",
        "Assigned partitions whose log is not the one their ledger describes (nothing counted; "
        "preagg positions reset decides)",
        lambda f: len(f.diverged),
    ),
    (
        "counter",
        "preagg_write_conflicts",
        "Commits aborted by another worker's transaction on the same document (retried)",
        lambda f: f.stats.write_conflicts,
    ),
    (
        "counter",
        "preagg_commit_token_attempts",
        "Commit attempts that took the stream's commit token first (after write conflicts)",
        lambda f: f.stats.token_commits,
    ),
    (
        "gauge",
        "preagg_commit_token_mode",
        "1 while commits take the commit token (a write conflict in the last 5 minutes)",
        lambda f: float(f.contended()),
    ),
    (
        "counter",
        "preagg_flushes_redone",
        "Flushes cut short (a crash, a lost partition) whose range this worker wrote again",
        lambda f: f.stats.redone,
    ),
    (
        "counter",
        "preagg_upserts_already_applied",
        "Upserts refused with a duplicate key whose document held the flush's marks (a flush written again)",
        lambda f: f.stats.marks_applied,
    ),
    (
        "counter",
        "preagg_upserts_raced",
        "Upserts refused with a duplicate key: another writer inserted the document first (sent again)",
        lambda f: f.stats.inserts_raced,
    ),
    (
        "counter",
        "preagg_upserts_split_by_partition",
        "Merged upserts some of whose partitions were applied: the other partitions' shares sent apart",
        lambda f: f.stats.shares_split,
    ),
    (
        "counter",
        "preagg_commit_permanent_errors",
        "Flushes escalated after failing the same permanent way (a document the store refuses for good)",
        lambda f: f.stats.permanent_errors,
    ),
    (
        "gauge",
        "preagg_commit_stuck",
        "1 while a flush fails for good (escalated: /health/ready 503 until the document is fixed)",
        lambda f: float(f.stuck is not None),
    ),
    (
        "counter",
        "preagg_unwritable_events",
        "Events dead-lettered because the store refused their message's writes for good (transactions)",
        lambda f: f.stats.unwritable,
    ),
    (
        "gauge",
        "preagg_idempotent_writes",
        "1 when the stream's flushes are marked bulk writes, 0 when transactions",
        lambda f: float(f.marked),
    ),
    (
        "counter",
        "preagg_records_let_go",
        "Records a reader let go of at its memory bound, for the other reader of its consumer to go on",
        lambda f: f.let_go.ranges.let_go if f.let_go is not None else 0,
    ),
    (
        "counter",
        "preagg_records_read_again",
        "Records let go of and read again from Kafka once there was room",
        lambda f: f.let_go.ranges.reread if f.let_go is not None else 0,
    ),
    (
        "counter",
        "preagg_records_fenced",
        "Records delivered past a range let go of and released at a rebalance: not taken, read again",
        lambda f: f.let_go.ranges.fenced_records if f.let_go is not None else 0,
    ),
    (
        "gauge",
        "preagg_records_behind",
        "Records let go of and not read again yet (offsets; at most PREAGG_MAX_PENDING_KEYS)",
        lambda f: f.let_go.ranges.behind() if f.let_go is not None else 0,
    ),
    (
        "counter",
        "preagg_held_back_messages",
        "Messages of diverged partitions, not counted",
        lambda f: f.stats.held_back,
    ),
]


class WorkerCollector(Collector):
    """Exposes the figures of a worker's flushers and its consumer lag."""

    def __init__(
        self,
        flushers: Sequence[Flusher[Any]],
        lag: LagSource,
        started: float | None = None,
        extra: Sequence[Callable[[], Iterable[Metric]]] = (),
        max_flush_age: float = 30.0,
        backlog_interval: float = 0.0,
    ) -> None:
        self.flushers = flushers
        #: The readiness bounds, so ``preagg_flush_stale`` says what ``/health/ready`` says.
        self.max_flush_age, self.backlog_interval = max_flush_age, backlog_interval
        #: Metrics the kinds add (hits: the name store's).
        self.extra = extra
        self.lag = lag
        self.started = started if started is not None else time.time()

    def collect(self) -> Iterator[Metric]:
        yield from self.stream_families(time.time())
        lag = GaugeMetricFamily(
            "preagg_consumer_lag",
            "Messages behind the end of each assigned partition",
            labels=["topic", "partition"],
        )
        for (topic, partition), n in sorted(self.lag().items()):
            lag.add_metric([topic, str(partition)], n)
        rss = GaugeMetricFamily(
            "preagg_worker_rss_bytes",
            "Resident memory of the worker (its batches are bounded by PREAGG_MAX_PENDING_KEYS)",
        )
        rss.add_metric([], rss_bytes())
        yield from (lag, rss)
        for more in self.extra:
            yield from more()

    def stream_families(self, now: float) -> list[Metric]:
        """The series each flusher has one of (labelled by its stream)."""
        labels = ["stream"]
        events = CounterMetricFamily("preagg_events", "Events taken into flushed batches", labels=labels)
        skipped = CounterMetricFamily(
            "preagg_replayed_messages_skipped",
            "Re-delivered Kafka messages skipped because MongoDB already counted them",
            labels=labels,
        )
        rejected = CounterMetricFamily(
            "preagg_rejected", "Events sent to the dead-letter topic", labels=["stream", "reason"]
        )
        flushes = CounterMetricFamily("preagg_flushes", "Successful flushes", labels=labels)
        retries = CounterMetricFamily(
            "preagg_flush_retries", "Failed store or broker calls retried", labels=labels
        )
        docs = CounterMetricFamily("preagg_documents_written", "Documents upserted by flushes", labels=labels)
        latency = HistogramMetricFamily(
            "preagg_flush_seconds", "Duration of successful flushes", labels=labels
        )
        pending = GaugeMetricFamily(
            "preagg_pending_keys", "Aggregate keys and dead letters in memory", labels=labels
        )
        bound = GaugeMetricFamily(
            "preagg_pending_keys_bound", "Pending items that pause consumption", labels=labels
        )
        paused = GaugeMetricFamily(
            "preagg_backpressure_paused", "1 while consumption waits for a flush", labels=labels
        )
        paused_s = CounterMetricFamily(
            "preagg_backpressure_seconds", "Time consumption spent paused for backpressure", labels=labels
        )
        since = GaugeMetricFamily(
            "preagg_seconds_since_last_flush",
            "Seconds since the last successful flush (since start if none yet)",
            labels=labels,
        )
        stale = GaugeMetricFamily(
            "preagg_flush_stale",
            "1 while counted events wait longer than the flush bound (readiness fails): "
            "a quiet stream or a worker without partitions is never stale",
            labels=labels,
        )
        commit_series = [
            (
                CounterMetricFamily(name, doc, labels=labels)
                if kind == "counter"
                else GaugeMetricFamily(name, doc, labels=labels),
                value,
            )
            for kind, name, doc, value in COMMIT_SERIES
        ]
        for f in self.flushers:
            s, name = f.stats, [f.stream]
            for family, value in commit_series:
                family.add_metric(name, value(f))
            events.add_metric(name, s.events)
            skipped.add_metric(name, s.skipped)
            for reason, n in sorted(s.rejected.items()) if family_of(f.stream) is None else ():
                rejected.add_metric([f.stream, reason], n)  # a family's are its stream's
            flushes.add_metric(name, s.flushes)
            retries.add_metric(name, s.retries)
            docs.add_metric(name, s.docs)
            latency.add_metric(name, cumulative_buckets(s.latency_counts), s.latency_sum)
            pending.add_metric(name, f.pending_keys())
            bound.add_metric(name, f.max_pending_keys)
            paused.add_metric(name, 1 if s.paused_since is not None else 0)
            paused_s.add_metric(name, s.backpressure_seconds)
            since.add_metric(name, now - (s.last_flush_at or self.started))
            late = is_stale(f, self.max_flush_age, self.started, now, self.backlog_interval)
            stale.add_metric(name, 1 if late else 0)
        plain = [events, skipped, rejected, flushes, retries, docs, latency, pending, bound, paused]
        return [*plain, paused_s, since, stale, *(family for family, _ in commit_series)]


def cumulative_buckets(counts: Sequence[int]) -> list[tuple[str, float]]:
    """A flush-latency histogram's buckets as Prometheus wants them: cumulative, ``+Inf`` last."""
    cumulative, buckets = 0, []
    for upper, n in zip((*map(str, LATENCY_BUCKETS), "+Inf"), counts, strict=True):
        cumulative += n
        buckets.append((upper, float(cumulative)))
    return buckets


def exposition(collector: WorkerCollector) -> bytes:
    """The Prometheus text format of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    out: bytes = generate_latest(registry)
    return out


def is_stale(
    f: Flusher[Any], max_flush_age: float, started: float, now: float, backlog_interval: float = 0.0
) -> bool:
    """Counted events wait past the bound, or the flush running now has run past it.

    Nothing pending is never stale, however old the last flush: a quiet night or a worker
    holding no partition has nothing to flush. A flush running longer than the bound is
    stale too: the name store or the store holding one flush for a minute must not read
    "ok" until it ends. A stream catching up a backlog defers its flushes on purpose.
    """
    s = f.stats
    age = now - (s.last_flush_at or started)
    running = now - s.flush_started_at if s.flush_started_at is not None else 0.0
    allowed = max_flush_age + (backlog_interval if f.deferring else 0.0)
    return (f.pending_keys() > 0 and age > allowed) or running > max_flush_age


def health(
    flushers: Iterable[Flusher[Any]],
    max_flush_age: float,
    started: float,
    now: float | None = None,
    backlog_interval: float = 0.0,
) -> dict[str, Any]:
    """``{"ok": bool, ...}``: unhealthy when data waits and no flush succeeded for ``max_flush_age`` s,
    or when the flush running now has run longer than that.

    A stream catching up a backlog defers its flushes on purpose (``backlog_interval``,
    ``PREAGG_BACKLOG_FLUSH_INTERVAL``): its data may wait that much longer.
    """
    now = time.time() if now is None else now
    streams = {}
    ok = True
    for f in flushers:
        s = f.stats
        age = now - (s.last_flush_at or started)
        running = now - s.flush_started_at if s.flush_started_at is not None else 0.0
        stale = is_stale(f, max_flush_age, started, now, backlog_interval)
        ok = ok and not stale and not f.diverged
        streams[f.stream] = {
            "pending": f.pending_keys(),
            "seconds_since_flush": round(age, 3),
            "flush_running_seconds": round(running, 3),
            "paused": s.paused_since is not None,
            "catching_up": f.deferring,
            "stale": stale,
            "sealed_batches": len(f.sealed),
            "commit_docs_limit": f.bound.docs_limit,
            "unsplittable_failures": s.unsplittable,
            "diverged": {f"{t}[{p}]": why for (t, p), why in f.diverged.items()},
        }
    return {"ok": ok, "streams": streams}


def refused_commits_metric(refusals: int) -> Metric:
    """``preagg_kafka_commits_refused_total``: offset commits Kafka refused (each asked again)."""
    family = CounterMetricFamily(
        "preagg_kafka_commits_refused",
        "Offset commits Kafka refused during a rebalance; each is asked again at the next commit",
    )
    family.add_metric([], refusals)
    return family
