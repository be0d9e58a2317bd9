"""The worker's web pages: Prometheus `/metrics`, `/health/ready` (and `/health`), `/health/live`.

Readiness fails for everything an operator may need to see (not in the group yet, a
stale flush, a partition held back, a write that fails for good); liveness only when the
process cannot recover by itself, which a restart would fix: its event loop not answering.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import faust
from prometheus_client.core import Metric

from pipeline.settings import Settings
from pipeline.worker.flusher import Flusher
from pipeline.worker.metrics import CONTENT_TYPE, WorkerCollector, exposition, health


def add_web_pages(
    app: faust.App,
    settings: Settings,
    flushers: list[Flusher[Any]],
    extra_metrics: list[Callable[[], Iterable[Metric]]],
    started: float,
    joined: Callable[[], bool] = lambda: True,
) -> None:
    """Prometheus ``/metrics`` and ``/health`` on the worker's web server."""

    def consumer_lag() -> dict[tuple[str, int], int]:
        out = {}
        consumer = app.consumer
        for tp in consumer.assignment():
            hw = consumer.highwater(tp)
            key = (tp.topic, tp.partition)
            for f in flushers:
                if hw is not None and f.positions.known(key):
                    out[key] = max(0, hw - (f.consumed.get(key) or f.positions.get(key) or 0))
        return out

    collector = WorkerCollector(
        flushers,
        consumer_lag,
        started,
        extra_metrics,
        max_flush_age=settings.health_max_flush_age,
        backlog_interval=settings.backlog_flush_interval,
    )

    @app.page("/metrics")
    async def metrics(self: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return self.bytes(exposition(collector), content_type=CONTENT_TYPE)

    async def ready(view: faust.web.View) -> faust.web.Response:
        verdict = health(
            flushers, settings.health_max_flush_age, started, backlog_interval=settings.backlog_flush_interval
        )
        verdict["worker"] = settings.worker_id
        verdict["assigned"] = sorted(f"{tp.topic}[{tp.partition}]" for tp in app.consumer.assignment())
        stuck = {f.stream: f.stuck for f in flushers if f.stuck is not None}
        if stuck:  # a write that fails for good: retrying cannot help, an operator must act
            verdict["ok"], verdict["stuck"] = False, stuck
        idle = getattr(app, "idle_watch", None)
        if idle is not None and idle.problem is not None:  # in the group, no partition, messages waiting
            verdict["ok"], verdict["idle"] = False, idle.problem
        if not joined():  # a fresh worker counts nothing until its group gives it an assignment
            verdict["ok"] = False
            verdict["joining"] = "not in the consumer group yet: waiting for an assignment"
        return view.json(verdict, status=200 if verdict["ok"] else 503)

    @app.page("/health/ready")
    async def readiness(self: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        """Readiness: in the group and counting keeps up (503 until the first assignment, while a
        flush is stale or a partition is held back)."""
        return await ready(self)

    @app.page("/health")
    async def healthcheck(self: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        """``/health/ready`` under its old name."""
        return await ready(self)

    @app.page("/health/live")
    async def liveness(self: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        """Liveness: the process's event loop answers. 200 through a store outage and through a
        write that fails for good, on purpose: a restart brings no store back and fixes no
        document, while each restart is a rebalance for the whole group and hands the same
        document to the next owner. Those are readiness failures, metered and alerted on."""
        stuck = {f.stream: f.stuck for f in flushers if f.stuck is not None}
        body: dict[str, Any] = {"live": True, "worker": settings.worker_id}
        body["uptime"] = round(time.time() - started, 1)
        if stuck:  # reported, not failed: only an operator helps (readiness and the alert say so)
            body["stuck"] = stuck
        return self.json(body)
