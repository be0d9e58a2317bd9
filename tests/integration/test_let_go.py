"""The pages' reader lets go of records at its memory bound and reads them again from Kafka, on the
real services: counted once, alone or through a rebalance while it is behind.

The site rollups' reader shares the consumer; were the pages' reader to wait at its bound, the
rollups would wait with it. A bound of a few hundred keys makes it let go on a small backlog.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import audit_traffic, produce

pytestmark = pytest.mark.integration


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(ln.split()[-1]) for ln in body.splitlines() if ln.startswith(name + "{"))


def let_go_of_some(port: int, timeout: float = 180.0) -> None:
    """Until the worker's metrics say its pages' reader let go of records (a counter: no race)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if metric(port, "preagg_records_let_go_total") > 0:
                return
        except OSError:
            pass  # not serving yet
        assert time.monotonic() < deadline, "the pages' reader never let go of records"
        time.sleep(0.3)


def test_records_let_go_of_are_read_again_and_counted_once(settings: Settings) -> None:
    settings = settings.with_(partitions=4, max_pending_keys=300)
    traffic = generate(6_000, end=time.time(), days=2, seed=23, bad_share=0.01)
    asyncio.run(produce(settings, [(line, None) for line, _ in traffic.lines], pack=1))  # keyless lines
    web = free_port()
    w = WorkerProcess(settings.with_(web_port=web), "let-go").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=240))
        let_go = metric(web, "preagg_records_let_go_total")
        again = metric(web, "preagg_records_read_again_total")
        behind = metric(web, "preagg_records_behind")
    finally:
        assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    assert let_go > 0 and again > 0 and behind == 0, (let_go, again, behind)
    problems, events = audit_traffic(settings, traffic)
    assert problems == []
    assert events == len(traffic.lines)


def test_a_rebalance_while_the_pages_are_behind_reads_them_again_from_kafka(settings: Settings) -> None:
    settings = settings.with_(partitions=4, max_pending_keys=300)
    traffic = generate(12_000, end=time.time(), days=2, seed=29, bad_share=0.01)
    asyncio.run(produce(settings, [(line, None) for line, _ in traffic.lines], pack=1))
    web = free_port()
    first = WorkerProcess(settings.with_(web_port=web), "behind").start()
    second: WorkerProcess | None = None
    try:
        let_go_of_some(web)
        second = WorkerProcess(settings, "joins").start()  # a rebalance, most likely while behind
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=300))
    finally:
        assert first.terminate() == 0, first.log_path.read_text()[-3000:]
        if second is not None:
            assert second.terminate() == 0, second.log_path.read_text()[-3000:]
    problems, events = audit_traffic(settings, traffic)
    assert problems == []
    assert events == len(traffic.lines)
