"""A worker SIGTERMed mid-stream flushes and commits; its successor finishes: nothing lost or doubled."""

from __future__ import annotations

import asyncio
import time

import pytest

from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import group_lag, wait_caught_up
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import produce, with_db

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
