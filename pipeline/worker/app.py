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
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

import faust
from faust.types import TP

from pipeline.core.clock import DecisionClock
from pipeline.core.collector import tune
from pipeline.core.commit import WorkerSink
from pipeline.core.envelope import events_of, whole
from pipeline.core.errors import PreaggError
from pipeline.core.families import FamilySink, family_topic
from pipeline.core.fields import check_mode
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import PartitionProbe
from pipeline.kinds import Stream, StreamContext, load_kinds, stream_topics, unknown_variables
from pipeline.settings import Settings
from pipeline.worker.assignment import Assignments
from pipeline.worker.bounds import CommitBound
from pipeline.worker.consumer import Record, WorkerConsumer, deliver_batches, install
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.exits import EXIT_FENCED, exit_now, on_exit
from pipeline.worker.faults import fault_hook
from pipeline.worker.faust_conf import faust_settings
from pipeline.worker.flush_loop import FlushLoop
from pipeline.worker.flusher import Flusher
from pipeline.worker.forwarding import Forwarder, ForwardOf, forwarded_metrics
from pipeline.worker.guard import LedgerGuard, lost_metric
from pipeline.worker.idle import IdleWatch, idle_metric, look_at_topics
from pipeline.worker.joint import Ack, JointAck
from pipeline.worker.metrics import refused_commits_metric
from pipeline.worker.policy import FlushHooks, FlushPolicy, ignored, no_fault
from pipeline.worker.progress import Tally, report_progress
from pipeline.worker.rebalance import bound_revoke_drain, leave_group, membership, track_leadership
from pipeline.worker.refused import RefusedCommits
from pipeline.worker.retrying import retried
from pipeline.worker.shutdown import BoundedWorker
from pipeline.worker.start_watch import STARTED, group_context, watch_start
from pipeline.worker.store import MakeStore, Ready, Store
from pipeline.worker.web import add_web_pages

log = logging.getLogger("preagg.worker")

#: A bound that never seals a batch (idempotent writes: see stream_flusher).
UNBOUNDED = 1 << 62


def build_app(settings: Settings, make_store: MakeStore) -> tuple[faust.App, list[Flusher[Any]], Store]:
    """The worker's Faust app for the given (resolved) settings, its flushers (one per stream)
    and its store (closed by the entry point once the app has stopped): components made here
    and handed to one another, nothing else."""
    for name, near in unknown_variables(settings):  # a misspelt setting would keep its default unseen
        log.warning("%s is not a preagg setting: ignored%s", name, f" (did you mean {near}?)" if near else "")
    conf = faust_settings(settings)
    Path(conf["datadir"]).parent.mkdir(parents=True, exist_ok=True)
    install(settings.embedded_kafka)
    track_leadership(settings.embedded_kafka)
    app = faust.App(settings.group_id, **conf)
    fault = fault_hook(settings.fault)
    store = make_store(fault)
    guard = LedgerGuard(app, store.sink, PartitionProbe(KafkaConnection.of(settings)), settings.worker_id)
    clock = DecisionClock()  # one per worker: each batch pins its instant while it ingests
    ctx = StreamContext(settings, check_mode(settings.schema), store.db, clock)
    streams = [(kind, kind.stream(ctx, settings.of(kind))) for kind in load_kinds(settings.kinds)]
    topics = [settings.of(kind).topic for kind, _ in streams]
    flushers: list[Flusher[Any]] = []
    flushed_topics: list[str] = []  # each flusher's topic
    loop = FlushLoop(
        flushers,
        flushed_topics,
        settings.flush_interval,
        settings.backlog_flush_interval,
        lambda: app.consumer,
    )
    wiring = StreamWiring(app, settings, store.sink, guard, clock, loop.seal, fault)
    joints: list[JointAck] = []
    keepers: list[tuple[str, Callable[[set[int]], None]]] = []
    for (kind, stream), topic in zip(streams, topics, strict=True):
        for name, topic_of, of in ((kind.name, topic, stream), *((t, t, st) for t, st in stream.stages)):
            readers = wiring.flushers(name, of, joints, topic_of)
            if of.flush_interval is not None:
                loop.intervals.update((id(r), of.flush_interval) for r in readers)
            flushers.extend(readers)
            flushed_topics.extend(topic_of for _ in readers)
            _subscribe(app, topic_of, settings.partitions, readers)
            if of.keep is not None:
                keepers.append((topic_of, of.keep))
    assignments = Assignments(
        app, flushers, guard, store.record_assignment, store.sink.exactly_once, loop.settled
    )
    assignments.joints, assignments.keepers = joints, keepers
    loop.apart = bool(joints)
    assignments.install()
    bound_revoke_drain(app, flushers, settings.rebalance_timeout / 2)
    on_exit(lambda timeout: leave_group(app, timeout))
    app.task(lambda: prepare(settings, store))  # first: the store's checks, then "ready"
    loop.install(app)
    idle = IdleWatch(
        lambda: len(app.consumer.assignment()),
        lambda: look_at_topics(settings, store.sink.ledgers_of, topics),
        lambda: f"{membership(app)} of group {settings.group_id}",
        lambda why: exit_now(EXIT_FENCED, why),
    )
    app.idle_watch = idle  # type: ignore[attr-defined]
    every = [s for _, stream in streams for s in (stream, *(st for _, st in stream.stages))]
    extra_metrics = [s.metrics for s in every if s.metrics is not None]
    extra_metrics.append(lambda: [idle_metric(idle), lost_metric(guard.offsets_lost)])
    extra_metrics.append(lambda: forwarded_metrics(wiring.forwarders))
    extra_metrics.append(
        lambda: [refused_commits_metric(getattr(app.consumer, "refused_commits", RefusedCommits()).refusals)]
    )
    add_web_pages(app, settings, flushers, extra_metrics, time.time(), assignments.joined.is_set)
    tasks = [
        lambda: guard.watch(flushers),
        idle.forever,
        lambda: report_progress(lambda: tallies(flushers)),
        *(stream.background for _, stream in streams if stream.background is not None),
    ]
    for task in tasks:
        app.task(task)
    return app, flushers, store


async def prepare(settings: Settings, store: Store) -> None:
    """The store's checks before the first flush, then the line that says the worker is ready.

    The store may be down while the worker joins its group (a scale-up during an outage):
    retried and logged like every other store call, not a crash loop. A store that cannot
    serve the worker as set ends it with one line and the error's exit status."""
    try:
        await retried(store.prepare, "store not ready at start", store.errors)
    except PreaggError as exc:
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


def tallies(flushers: Sequence[Flusher[Any]]) -> dict[str, Tally]:
    return {
        f.stream: Tally(f.stats.events, sum(f.stats.rejected.values()), f.stats.flushes, f.stats.docs)
        for f in flushers
    }


class StreamWiring:
    """What every stream's flusher is given: the sink, dead letters, acks, the guard, the clock."""

    def __init__(
        self,
        app: faust.App,
        settings: Settings,
        sink: WorkerSink,
        guard: LedgerGuard,
        clock: DecisionClock,
        sealed: Callable[[], None],
        fault: Callable[[str], None] | None,
    ) -> None:
        self.app, self.settings, self.sink, self.guard = app, settings, sink, guard
        self.clock, self.sealed, self.fault = clock, sealed, fault
        self.dead_topic = app.topic(
            settings.deadletter_topic, key_serializer="raw", value_serializer="raw", partitions=1
        )
        self.ranges = PartitionProbe(KafkaConnection.of(settings))
        #: Each stream's sends to another stage (their counts are metrics).
        self.forwarders: list[Forwarder] = []

    async def send_dead(self, letters: Sequence[DeadLetter]) -> None:
        # A deadline like every store call: an unreachable broker is a logged, retried failure.
        async with asyncio.timeout(self.settings.commit_timeout):
            futures = [
                await self.dead_topic.send(key=d.topic.encode(), value=d.encode(self.settings.worker_id))
                for d in letters
            ]
            for fut in futures:
                await fut

    def forwarder(self, stream: Stream, read: str) -> ForwardOf | None:
        """What the stream's flushes (of topic ``read``) forward (``Stream.forwarded``), sent to its
        topic; ``None``: nothing."""
        if stream.forwarded is None:
            return None
        if stream.writes != "idempotent" or not self.sink.exactly_once:
            raise ValueError(f"{stream.forward_topic}: forwarding needs exactly-once idempotent writes")
        topic = self.app.topic(stream.forward_topic, key_serializer="raw", value_serializer="raw")

        async def send(value: bytes, partition: int) -> Awaitable[object]:
            return await topic.send(value=value, partition=partition)

        forwarder = Forwarder(
            stream.forward_topic,
            stream.forwarded,
            send,
            lambda: self.ranges.partitions(stream.forward_topic),
            self.settings.commit_timeout,
            self.settings.group_id,
            lambda partition, end: self._at_end(read, partition, end),
            lambda: self.ranges.partitions(read),
        )
        self.forwarders.append(forwarder)
        return forwarder.of

    def _at_end(self, topic: str, partition: int, end: int) -> bool:
        """Whether a flush that read ``topic[partition]`` up to ``end`` read all the consumer has seen
        there (its highwater; unknown: no)."""
        high = self.app.consumer.highwater(TP(topic, partition))
        return high is not None and end >= high

    async def ack(self, handles: Sequence[object]) -> None:
        cast(WorkerConsumer, self.app.consumer).ack_records(cast(Sequence[Record], handles))

    async def read_range(self, tp: tuple[str, int], start: int | None, end: int) -> list[Any]:
        records = await self.ranges.read_range(tp[0], tp[1], start, end)
        if start is not None and (first := await self.ranges.log_start(*tp)) > start:
            await self.guard.lost(tp, start, min(first, end))  # a redo of records retention deleted
        return records

    def flushers(self, name: str, stream: Stream, joints: list[JointAck], topic: str) -> list[Flusher[Any]]:
        """The flusher of ``stream`` (reading ``topic``), and with a family of documents flushed ahead
        of it, that family's first (:mod:`pipeline.core.families`): both read every record, acked
        once both committed it."""
        ahead = stream.ahead
        if ahead is None or stream.writes != "idempotent" or not self.sink.exactly_once:
            return [self.flusher(name, stream, topic=topic)]
        if not stream.ahead_family:
            raise ValueError(f"{name}: a family of documents flushed ahead needs a name (ahead_family)")
        joint = JointAck(self.ack)
        joints.append(joint)
        family = FamilySink(self.sink, stream.ahead_family)
        self.guard.families.append(family)
        main = FamilySink(self.sink, None, (stream.ahead_family,))
        # The family's refusals are its stream's, sent by the stream's own flusher: both read
        # the same records and decide alike (pipeline/core/clock.py).
        return [
            self.flusher(
                family_topic(name, stream.ahead_family),
                ahead,
                joint.party(1),
                family,
                sends_dead=False,
                topic=topic,
            ),
            self.flusher(name, stream, joint.party(0), main, let_go=True, topic=topic),
        ]

    def flusher(
        self,
        name: str,
        stream: Stream,
        ack: Ack | None = None,
        sink: WorkerSink | FamilySink | None = None,
        sends_dead: bool = True,
        let_go: bool = False,
        topic: str = "",
    ) -> Flusher[Any]:
        """One flusher of ``stream`` (by default on the worker's sink and acks); ``sends_dead``
        ``False``: another reader of the same records sends and logs their dead letters; ``let_go``:
        it lets go of records at its memory bound, for the other reader of its consumer to go on."""
        s = self.settings
        marked = stream.writes == "idempotent"
        # Idempotent writes have no transaction to keep small: a batch is sealed by the
        # memory bound (max_pending_keys) and the flush interval only.
        bound = (
            CommitBound(UNBOUNDED, UNBOUNDED, float("inf"))
            if marked
            else CommitBound(s.commit_max_docs, s.commit_max_bytes, s.commit_target_seconds)
        )
        sink = sink or self.sink
        forward_of = self.forwarder(stream, topic)
        flusher: Flusher[Any] = Flusher(
            name,
            stream.factory,
            sink,
            self.send_dead if sends_dead else None,
            ack or self.ack,
            FlushPolicy(s.max_pending_keys, s.fields_per_update, marked=marked),
            bound,
            FlushHooks(
                fault=self.fault or no_fault,
                on_sealed=self.sealed,
                on_stuck=sink.note_stuck,
                before_plan=stream.before_plan,
                before_plan_label=stream.before_plan_label,
                after_commit=stream.after_commit,
                on_busy=stream.on_busy or ignored,
                forward_of=forward_of,
            ),
            checks=self.guard,
            read_range=self.read_range,
            clock=self.clock,
            let_go=let_go,
            events=whole if stream.whole_messages else events_of,
        )
        if forward_of is not None:
            self.forwarders[-1].idle = lambda: self._idle(flusher, topic)
        return flusher

    def _idle(self, flusher: Flusher[Any], topic: str) -> set[int]:
        """:meth:`Flusher.idle` of the partitions of ``topic`` the consumer holds (asked when a
        message is forwarded: Faust makes its consumer after the wiring)."""
        consumer = self.app.consumer
        return flusher.idle([tp for tp in consumer.assignment() if tp.topic == topic], consumer.highwater)


def _subscribe(app: faust.App, topic_name: str, partitions: int, readers: Sequence[Flusher[Any]]) -> None:
    """Subscribe to ``topic_name`` and hand its records to each of ``readers`` in turn, a
    partition's list at a time (a family ahead first: its flush is the one a chart waits for)."""
    topic = app.topic(topic_name, key_serializer="raw", value_serializer="raw", partitions=partitions)
    app.topics.add(topic)

    async def handle(tp: TP, records: Sequence[Record]) -> None:
        # The record is its own ack handle; its timestamp is Kafka's milliseconds (-1: none).
        taken = [(r.offset, r.value, r, max(r.timestamp, 0)) for r in records]
        for flusher in readers:
            if not await flusher.receive_many((tp.topic, tp.partition), taken):
                return  # abandoned by a rebalance: read again after it, by every reader alike

    def taken(tp: TP) -> int | None:
        got = [f.consumed.get((tp.topic, tp.partition)) for f in readers]
        return None if None in got else min(n for n in got if n is not None)

    deliver_batches(app, topic_name, handle, taken)


def run_worker(settings: Settings, ready: Ready, make_store: MakeStore, loglevel: str = "info") -> None:
    """Run one worker process until SIGTERM/SIGINT (flushes before exit).

    Topics and collections must exist (``preagg setup``); with ``auto_setup`` (the
    embedded default) the worker creates them itself. Missing ones stop it at once
    with one line naming them (exit status 2).
    """
    tune()  # the collector's young generation, for a process holding millions of objects
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
