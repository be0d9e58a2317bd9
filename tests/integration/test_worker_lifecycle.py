"""A worker SIGTERMed mid-stream flushes and commits; its successor finishes: nothing lost or doubled."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

import pytest

from pipeline.kinds import stream_topics
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import group_lag, wait_caught_up
from pipeline.settings import Settings
from pipeline.testing.kinds_truth import audit_other_kinds, generate_other_kinds, produce_other_kinds
from pipeline.testing.traffic import Traffic, generate
from pipeline.worker.process import WorkerProcess

from ..unit.test_deploy import named, plain
from .helpers import audit_traffic, cli, produce, with_db

pytestmark = pytest.mark.integration


async def _total(db) -> int:  # type: ignore[no-untyped-def]
    f = hits_fields().monthly
    return sum([d[f.total] async for d in db[f.collection].find({}, {f.total: 1})])


def test_sigterm_mid_stream_then_restart_loses_nothing(settings: Settings) -> None:
    settings = settings.with_(max_pending_keys=500)  # many small flushes: a stop lands mid-stream
    traffic = generate(40_000, end=time.time(), days=2, seed=3, bad_share=0)
    half = len(traffic.lines) // 2
    asyncio.run(produce(settings, traffic.lines[:half], pack=20))

    w = WorkerProcess(settings, "first").start()
    deadline = time.monotonic() + 120
    while with_db(settings, _total) == 0:  # wait for the first flush
        assert time.monotonic() < deadline and w.alive(), w.log_path.read_text()[-3000:]
        time.sleep(0.2)
    asyncio.run(produce(settings, traffic.lines[half:], pack=20))  # more arrives while it runs
    assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    stopped_at = with_db(settings, _total)
    lag = sum(p.lag for p in asyncio.run(group_lag(settings, [settings.topic("hits")])))
    assert stopped_at < traffic.valid and lag > 0, "the stop should have landed mid-stream"

    w2 = WorkerProcess(settings, "second").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
    finally:
        assert w2.terminate() == 0
    assert with_db(settings, _total) == traffic.valid


GRACE = named(plain(), "Deployment", "preagg-worker")["spec"]["template"]["spec"][
    "terminationGracePeriodSeconds"
]


def _stop_at(settings: Settings, name: str, marker: str | None) -> int:
    """Start a worker, SIGTERM it when ``marker`` is in its log (``None``: at once), and return
    its exit status; it must exit within the Deployment's grace, as the kubelet allows."""
    w = WorkerProcess(settings, name)
    w.spawn()
    deadline = time.monotonic() + 120
    while marker is not None and marker not in w.log_path.read_text():
        assert w.alive() and time.monotonic() < deadline, w.log_path.read_text()[-3000:]
        time.sleep(0.05)
    assert w.proc is not None
    w.proc.send_signal(signal.SIGTERM)
    try:
        return w.proc.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        w.kill()
        raise AssertionError(
            f"still running {GRACE} s after SIGTERM:\n{w.log_path.read_text()[-3000:]}"
        ) from None


def test_sigterm_at_every_moment_of_a_start_ends_within_the_grace_and_counts_once(settings: Settings) -> None:
    """The kubelet's SIGTERM can come at any moment: before Python installed a handler (the
    default action ends the process, as under tini, where the worker is not PID 1), while it
    joins its group, once ready, and mid-stream with hits and listens arriving. Each stop ends
    within the grace period with status 0 (or by the signal, before the handlers exist), never
    by the stop deadline (76); a last worker then counts every event exactly once."""
    settings = settings.with_(kinds=("hits", "impressions", "relations", "listens"))
    cli(settings, "setup")
    first = generate(2_000, end=time.time(), days=1, seed=12, bad_share=0)
    second = generate(2_000, end=time.time(), days=1, seed=13, bad_share=0)
    others = generate_other_kinds(seed=12, events=400)
    asyncio.run(produce(settings, first.lines, pack=1))
    moments = {
        "at once": None,
        "joining": "starting: joining the consumer group",
        "ready": "ready: topics",
        "mid-stream": "flushed hits",
    }
    for i, (moment, marker) in enumerate(moments.items()):
        if moment == "mid-stream":  # more arrives while it counts
            asyncio.run(produce(settings, second.lines, pack=1))
            asyncio.run(produce_other_kinds(settings, others))
        status = _stop_at(settings, f"start-{i}", marker)
        assert status == (-signal.SIGTERM if moment == "at once" else 0), (moment, status)
    last = WorkerProcess(settings, "last").start()
    try:
        deadline = time.monotonic() + 120
        while "ready: topics" not in last.log_path.read_text():  # its handlers are in place
            assert last.alive() and time.monotonic() < deadline, last.log_path.read_text()[-3000:]
            time.sleep(0.1)
        asyncio.run(wait_caught_up(settings, stream_topics(settings), timeout=180))
    finally:
        assert last.terminate() == 0, last.log_path.read_text()[-3000:]
    problems, events = audit_traffic(settings, Traffic(per_minute=first.per_minute + second.per_minute))
    sent = len(first.lines) + len(second.lines) + sum(map(len, others.lines().values()))
    assert problems == [] and events == sent, problems[:10]
    assert with_db(settings, lambda db: audit_other_kinds(db, settings, others)) == []
