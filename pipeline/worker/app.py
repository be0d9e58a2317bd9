"""The Faust application: one agent and flusher per stream kind, the flush loop, dead letters, web pages.

Each stream topic's records go from Faust's consumer to its flusher as raw bytes, one
list per partition and fetch (:mod:`pipeline.worker.consumer`), so that a bad event
reaches the dead-letter topic exactly as it was sent and one event per message costs
microseconds, not Faust's per-event stream machinery. A message is acked
(``Consumer.ack``) only by the flusher, after MongoDB committed the transaction holding
its events and offsets. Faust commits acked offsets, and on shutdown and rebalance it
waits for every delivered message to be acked (``stream_wait_empty``) while the flush
loop keeps running, so SIGTERM and rebalances flush before partitions move.

The web server (``web_port``) serves Prometheus ``/metrics``, ``/health/live`` and ``/health/ready``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import faust
from faust.types import TP

from pipeline.core.clock import DecisionClock
from pipeline.core.commit import WorkerSink
from pipeline.core.errors import PreaggError
from pipeline.core.fields import check_mode
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import PartitionProbe
from pipeline.kinds import StreamContext, load_kinds, stream_topics, unknown_variables
from pipeline.settings import Settings
from pipeline.worker.backlog import BACKLOG_MESSAGES, behind
from pipeline.worker.bounds import CommitBound
from pipeline.worker.consumer import Record, WorkerConsumer, deliver_batches, install
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.exits import EXIT_FENCED, exit_now, on_exit
from pipeline.worker.faults import fault_hook
from pipeline.worker.faust_conf import faust_settings
from pipeline.worker.flusher import Flusher
from pipeline.worker.guard import LedgerGuard, lost_metric
from pipeline.worker.idle import IdleWatch, idle_metric, look_at_topics
from pipeline.worker.metrics import refused_commits_metric
from pipeline.worker.policy import FlushHooks, FlushPolicy, no_fault
from pipeline.worker.progress import Tally, report_progress
from pipeline.worker.rebalance import (
    bound_revoke_drain,
    last_join,
    leave_group,
    membership,
    track_leadership,
)
from pipeline.worker.refused import RefusedCommits
from pipeline.worker.shutdown import BoundedWorker
from pipeline.worker.start_watch import STARTED, group_context, watch_start
from pipeline.worker.web import add_web_pages

log = logging.getLogger("preagg.worker")

#: A bound that never seals a batch (idempotent writes: see build_app).
UNBOUNDED = 1 << 62


async def retried(
    op: Callable[[], Awaitable[object]],
    what: str,
    errors: type[Exception] | tuple[type[Exception], ...],
    attempts: int | None = None,
) -> bool:
    """Run ``op`` until it succeeds (``True``), each failure logged and backed off (1 s doubling to
    30 s); after ``attempts`` failures (``None``: never) give up (``False``)."""
    delay, failed = 1.0, 0
    while True:
        try:
            await op()
            return True
        except errors as exc:
            failed += 1
            if attempts is not None and failed >= attempts:
                log.warning("%s (%s: %s); giving up", what, type(exc).__name__, str(exc)[:200])
                return False
            log.warning("%s (%s: %s); retrying in %.0fs", what, type(exc).__name__, str(exc)[:200], delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


class Store(Protocol):
    """A worker's store, made by the entry point (MongoDB: pipeline/store/worker_store.py)."""

    @property
    def db(self) -> Any:
        """The database the kinds read and write besides flushes (their name stores, settlers)."""
        ...

    @property
    def sink(self) -> WorkerSink: ...

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """Failures a retry may cure."""
        ...

    async def prepare(self) -> None:
        """Checks before the first flush; raises a ``PreaggError`` the worker cannot run past."""
        ...

    async def record_assignment(self, member: str, held: list[str]) -> None:
        """What this member holds, for ``preagg status``: best effort."""
        ...

    async def close(self) -> None: ...


#: Makes the worker's store, given the fault hook its commits call (``None``: no fault injected).
MakeStore = Callable[[Callable[[str], None] | None], Store]
#: What runs before the worker joins its group: log lines, or a one-line refusal.
Ready = Callable[[], Coroutine[Any, Any, tuple[list[str], str | None]]]


def build_app(settings: Settings, make_store: MakeStore) -> tuple[faust.App, list[Flusher[Any]], Store]:
    """The worker's Faust app for the given (resolved) settings, its flushers (one per stream)
    and its store (closed by the entry point once the app has stopped)."""
    for name, near in unknown_variables(settings):  # a misspelt setting would keep its default unseen
        log.warning("%s is not a preagg setting: ignored%s", name, f" (did you mean {near}?)" if near else "")
    conf = faust_settings(settings)
    Path(conf["datadir"]).parent.mkdir(parents=True, exist_ok=True)
    install(settings.embedded_kafka)
    track_leadership(settings.embedded_kafka)
    app = faust.App(settings.group_id, **conf)
    dead_topic = app.topic(
        settings.deadletter_topic,
        key_serializer="raw",
        value_serializer="raw",
        partitions=1,
    )
    fault = fault_hook(settings.fault)
    store = make_store(fault)
    db, sink = store.db, store.sink
    started = time.time()

    async def send_dead(letters: Sequence[DeadLetter]) -> None:
        # A deadline like every store call: an unreachable broker is a logged, retried failure.
        async with asyncio.timeout(settings.commit_timeout):
            futures = [
                await dead_topic.send(key=d.topic.encode(), value=d.encode(settings.worker_id))
                for d in letters
            ]
            for fut in futures:
                await fut

    async def ack(handles: Sequence[object]) -> None:
        cast(WorkerConsumer, app.consumer).ack_records(cast(Sequence[Record], handles))

    guard = LedgerGuard(app, sink, PartitionProbe(KafkaConnection.of(settings)), settings.worker_id)

    ranges = PartitionProbe(KafkaConnection.of(settings))

    async def read_range(tp: tuple[str, int], start: int | None, end: int) -> list[Any]:
        records = await ranges.read_range(tp[0], tp[1], start, end)
        if start is not None and (first := await ranges.log_start(*tp)) > start:
            await guard.lost(tp, start, min(first, end))  # a redo of records retention deleted
        return records

    kinds = load_kinds(settings.kinds)
    clock = DecisionClock()  # one per worker: each batch pins its instant while it ingests
    ctx = StreamContext(settings, check_mode(settings.schema), db, clock)
    streams = [(kind, kind.stream(ctx, settings.of(kind))) for kind in kinds]
    flushers: list[Flusher[Any]] = []
    topics: list[str] = []  # each flusher's input topic
    settled: set[tuple[str, int]] = set()  # unread partitions found at their end (backlog.behind)
    #: Set when a batch is sealed at its commit bound: the flush loop commits it at once.
    sealed = asyncio.Event()
    for kind, stream in streams:
        marked = stream.writes == "idempotent"
        # Idempotent writes have no transaction to keep small: a batch is sealed by the
        # memory bound (max_pending_keys) and the flush interval only.
        bound = (
            CommitBound(UNBOUNDED, UNBOUNDED, float("inf"))
            if marked
            else CommitBound(
                settings.commit_max_docs, settings.commit_max_bytes, settings.commit_target_seconds
            )
        )
        flusher: Flusher[Any] = Flusher(
            kind.name,
            stream.factory,
            sink,
            send_dead,
            ack,
            FlushPolicy(settings.max_pending_keys, settings.fields_per_update, marked=marked),
            bound,
            FlushHooks(
                fault=fault or no_fault,
                on_sealed=sealed.set,
                on_stuck=sink.note_stuck,
                before_plan=stream.before_plan,
                before_plan_label=stream.before_plan_label,
                after_commit=stream.after_commit,
            ),
            checks=guard,
            read_range=read_range,
            clock=clock,
        )
        flushers.append(flusher)
        topics.append(settings.of(kind).topic)
        _subscribe(app, settings.of(kind).topic, settings.partitions, flusher)

    extra_metrics = [stream.metrics for _, stream in streams if stream.metrics is not None]
    joined = asyncio.Event()
    add_web_pages(app, settings, flushers, extra_metrics, started, joined.is_set)

    async def on_assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        # One line a rebalance (Faust's assignment tables are out of the log): what it holds now.
        held = sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned)
        log.info("assigned %d partition(s): %s", len(held), ", ".join(held) or "none")
        joined.set()  # in the group with an assignment (maybe empty): /health/ready may say yes
        recording[:] = [t for t in recording if not t.done()]
        recording.append(asyncio.ensure_future(record(held)))
        settled.clear()  # partitions found at their end (backlog.behind): ask the new ones
        # Positions may have moved while another worker held a partition: reload lazily.
        for f in flushers:
            f.forget_positions(f.positions.assigned())
        if sink.exactly_once and assigned:
            # Not in the rebalance's callback: Kafka and the store are asked after it.
            checking[:] = [t for t in checking if not t.done()]  # kept while running: not collected
            checking.append(
                asyncio.ensure_future(check_assignment([(tp.topic, tp.partition) for tp in assigned]))
            )

    checking: list[asyncio.Future[None]] = []
    recording: list[asyncio.Future[None]] = []

    async def record(held: list[str]) -> None:
        """What this member holds, for `preagg status` (brokers may not say): best effort."""
        await store.record_assignment(last_join(app)[0], held)

    async def check_assignment(tps: list[tuple[str, int]]) -> None:
        # The store or the broker away: tried again, then left to the gap check at a record.
        await retried(
            lambda: guard.at_assignment(tps),
            "cannot compare the assigned partitions' ledgers with Kafka now",
            Exception,
            attempts=6,
        )

    app.on_partitions_assigned.connect(cast(Any, on_assigned))
    bound_revoke_drain(app, flushers, settings.rebalance_timeout / 2)
    on_exit(lambda timeout: leave_group(app, timeout))

    @app.task
    async def prepare() -> None:
        # The store may be down while the worker joins its group (a scale-up during an
        # outage): retried, logged, like every other store call, not a crash loop.
        try:
            await retried(store.prepare, "store not ready at start", store.errors)
        except PreaggError as exc:  # the store cannot serve this worker as set: one line, exit 2
            log.error("%s", exc)
            raise SystemExit(exc.exit_code) from None
        STARTED.set()
        log.info(
            "worker %s ready: topics %s, MongoDB db %r, commit mode %s, web port %s",
            settings.worker_id,
            ", ".join(stream_topics(settings)),
            settings.db,
            settings.commit_mode,
            settings.web_port or "off",
        )

    async def catching_up(f: Flusher[Any], topic: str) -> bool:
        """Far behind the partitions' ends with a young batch: not worth a flush yet."""
        if settings.backlog_flush_interval <= 0 or f.batch_age() >= settings.backlog_flush_interval:
            return False
        return await behind(app.consumer, topic, f.consumed, settled) > BACKLOG_MESSAGES

    async def flush_forever() -> None:
        # Flushes start every flush_interval, counted from start to start: waiting a
        # full interval after a slow flush ended would add the flush's duration to
        # every event's wait (freshness). A flush longer than the interval is
        # followed at once by the next, never by a queue of missed ones. A batch
        # sealed at its commit bound in between is committed at once, on its own.
        loop = asyncio.get_running_loop()
        next_at = loop.time() + settings.flush_interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sealed.wait(), max(0.0, next_at - loop.time()))
            sealed.clear()
            if loop.time() < next_at:
                for f in flushers:
                    await f.run_flush(sealed_only=True)
                continue
            for f, topic in zip(flushers, topics, strict=True):
                f.deferring = await catching_up(f, topic)
                if f.deferring:
                    await f.run_flush(sealed_only=True)  # let the batch grow: one write per document
                else:
                    await f.run_flush()
            next_at = max(next_at + settings.flush_interval, loop.time())

    # Not a Faust timer: Faust cancels its timers when it stops, before it waits for
    # every delivered message to be acked; this loop outlives that wait and flushes
    # the last batch, so SIGTERM and rebalances end with everything committed.
    flush_loop: list[asyncio.Task[None]] = []

    @app.task
    async def start_flush_loop() -> None:
        flush_loop.append(asyncio.get_running_loop().create_task(flush_forever()))

    async def stop_flush_loop(sender: Any, **_: Any) -> None:
        # Faust signals this once every delivered message is acked (the last flush is
        # committed). Left running, the loop is a task Faust's worker waits ~2 s for at exit.
        for task in flush_loop:
            task.cancel()

    app.on_before_shutdown.connect(cast(Any, stop_flush_loop))

    @app.task
    async def watch_diverged() -> None:
        await guard.watch(flushers)

    for _, stream in streams:
        if stream.background is not None:
            app.task(stream.background)

    topics = [settings.of(kind).topic for kind, _ in streams]
    idle = IdleWatch(
        lambda: len(app.consumer.assignment()),
        lambda: look_at_topics(settings, sink.ledgers_of, topics),
        lambda: f"{membership(app)} of group {settings.group_id}",
        lambda why: exit_now(EXIT_FENCED, why),
    )
    app.idle_watch = idle  # type: ignore[attr-defined]
    extra_metrics.append(lambda: [idle_metric(idle), lost_metric(guard.offsets_lost)])
    extra_metrics.append(
        lambda: [refused_commits_metric(getattr(app.consumer, "refused_commits", RefusedCommits()).refusals)]
    )

    @app.task
    async def watch_idle() -> None:
        await idle.forever()

    def tallies() -> dict[str, Tally]:
        return {
            f.stream: Tally(f.stats.events, sum(f.stats.rejected.values()), f.stats.flushes, f.stats.docs)
            for f in flushers
        }

    @app.task
    async def progress() -> None:
        await report_progress(tallies)

    return app, flushers, store


def _subscribe(app: faust.App, topic_name: str, partitions: int, flusher: Flusher[Any]) -> None:
    """Subscribe to ``topic_name`` and hand its records to ``flusher``, a partition's list at a time."""
    topic = app.topic(topic_name, key_serializer="raw", value_serializer="raw", partitions=partitions)
    app.topics.add(topic)

    async def handle(tp: TP, records: Sequence[Record]) -> None:
        # The record is its own ack handle; its timestamp is Kafka's milliseconds (-1: none).
        await flusher.receive_many(
            (tp.topic, tp.partition), [(r.offset, r.value, r, max(r.timestamp, 0)) for r in records]
        )

    def taken(tp: TP) -> int | None:
        return flusher.consumed.get((tp.topic, tp.partition))

    deliver_batches(app, topic_name, handle, taken)


def run_worker(settings: Settings, ready: Ready, make_store: MakeStore, loglevel: str = "info") -> None:
    """Run one worker process until SIGTERM/SIGINT (flushes before exit).

    Topics and collections must exist (``preagg setup``); with ``auto_setup`` (the
    embedded default) the worker creates them itself. Missing ones stop it at once
    with one line naming them (exit status 2).
    """
    lines, refused = asyncio.run(ready())
    for line in lines:
        log.info("%s", line)
    if refused is not None:
        log.error("%s", refused)
        raise SystemExit(2)
    app, flushers, store = build_app(settings, make_store)
    watch_start(2 * settings.session_timeout + 30.0, group_context(settings, app))

    def left() -> str:
        counts = {f.stream: f.uncommitted_events() for f in flushers}
        return ", ".join(f"{n} {stream} events" for stream, n in counts.items() if n) or "nothing"

    worker = BoundedWorker(
        app,
        loglevel=loglevel,
        quiet=True,
        redirect_stdouts=False,
        shutdown_timeout=settings.shutdown_timeout,
        left=left,
        log_format=settings.log_format,
        log_flushes=settings.log_flushes,
        closing=[store.close],
    )
    worker.execute_from_commandline()
