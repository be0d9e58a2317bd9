"""The worker's web pages: Prometheus `/metrics`, `/health/ready` (and `/health`), `/health/live`."""

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

    collector = WorkerCollector(flushers, consumer_lag, started, extra_metrics)

    @app.page("/metrics")
    async def metrics(self: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return self.bytes(exposition(collector), content_type=CONTENT_TYPE)

    async def ready(view: faust.web.View) -> faust.web.Response:
        verdict = health(
            flushers, settings.health_max_flush_age, started, backlog_interval=settings.backlog_flush_interval
        )
        verdict["worker"] = settings.worker_id
        verdict["assigned"] = sorted(f"{tp.topic}[{tp.partition}]" for tp in app.consumer.assignment())
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
        """Liveness: the process's event loop answers. 200 through a store outage on purpose:
        restarting a worker does not bring a store back, and a restart during the outage's
        rebalance is what fences healthy workers (docs/operations.md). 503 when a flush fails
        for good (a permanent write error, escalated): nothing but an operator helps then."""
        stuck = {f.stream: f.stuck for f in flushers if f.stuck is not None}
        if stuck:  # a write that fails for good: retrying cannot help, an operator must act
            return self.json({"live": False, "worker": settings.worker_id, "stuck": stuck}, status=503)
        return self.json(
            {"live": True, "worker": settings.worker_id, "uptime": round(time.time() - started, 1)}
        )
