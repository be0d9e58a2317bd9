"""MongoDB down for 20 s during ingest: consumption pauses at the memory bound, nothing lost or doubled.

Runs on a private pair of embedded services whose store keeps its data on disk, so
that it can be stopped and started again under a running worker.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from pipeline.kinds.hits.audit import audit_hits
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.traffic import generate
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.services.embedded import EmbeddedServices, for_embedded, free_port
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

from .helpers import produce, with_db

pytestmark = pytest.mark.integration

BOUND = 400
PACK = 20


def scrape(port: int) -> dict[str, float]:
    """Unlabelled-by-partition gauges of the worker's /metrics, by series name."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("preagg_") and 'stream="hits"' in line:
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


def health(port: int, path: str = "/health/ready") -> int:
    try:
        return int(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status)
    except urllib.error.HTTPError as e:
        assert json.loads(e.read())["ok"] is False
        return e.code


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_store_down_20s_pauses_at_bound_then_resumes_exactly(tmp_path: Path) -> None:
    svc = EmbeddedServices(tmp_path / "svc", persistent=True)
    endpoints = svc.start()
    tag = uuid.uuid4().hex[:8]
    web = free_port()
    settings = for_embedded(
        Settings(
            partitions=3,
            home=tmp_path,
            flush_interval=0.5,
            session_timeout=10.0,
            max_pending_keys=BOUND,
            web_port=web,
            health_max_flush_age=5.0,
        ).named(tag),
        endpoints,
    )
    traffic = generate(30_000, end=time.time(), days=1, seed=21, bad_share=0.005)
    first, rest = traffic.lines[:3_000], traffic.lines[3_000:]
    worker = WorkerProcess(settings, "outage").start()
    try:
        asyncio.run(produce(settings, first, PACK))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120))
        rss_before = rss_kib(worker.pid)

        svc.stop_store()
        down_at = time.monotonic()
        producer = threading.Thread(target=lambda: asyncio.run(produce(settings, rest, PACK)))
        producer.start()
        samples = []
        statuses = set()
        live = set()
        while time.monotonic() - down_at < 20:
            time.sleep(1.0)
            m = scrape(web)
            samples.append((m["preagg_pending_keys"], m["preagg_backpressure_paused"], rss_kib(worker.pid)))
            statuses.add(health(web))
            live.add(health(web, "/health/live"))
        producer.join()
        svc.start_store()
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
        assert health(web) == 200 and health(web, "/health") == 200
    finally:
        rc = worker.terminate()
        svc.stop()
    log = worker.log_path.read_text()
    assert rc == 0, log[-3000:]

    rss_growth_mib = (max(r for _, _, r in samples) - rss_before) / 1024
    paused_share = sum(1 for _, paused, _ in samples if paused) / len(samples)
    print(
        f"\noutage drill: max pending {max(p for p, _, _ in samples):.0f} (bound {BOUND}), "
        f"paused in {paused_share:.0%} of samples, RSS growth {rss_growth_mib:.1f} MiB, "
        f"health {sorted(statuses)}"
    )
    # Bound: the batch being written plus the one being filled, one message over at most.
    assert max(p for p, _, _ in samples) <= BOUND + PACK, samples
    assert any(paused for _, paused, _ in samples), "consumption should have paused at the bound"
    assert 503 in statuses, "readiness should report the stalled flush"
    assert live == {200}, "liveness must hold through a store outage (a restart would not fix it)"
    assert rss_growth_mib < 64, f"worker memory grew {rss_growth_mib:.0f} MiB while the store was down"
    assert "backpressure: " in log and "retrying in" in log

    def check(db):  # type: ignore[no-untyped-def]
        async def run():  # type: ignore[no-untyped-def]
            problems = await audit_hits(db, traffic.per_minute, hits_fields())
            return problems, ledger_totals(await read_ledger(db, settings.group_id)).events

        return run()

    # the store is stopped now: audit on a fresh start of the same data
    svc2 = EmbeddedServices(tmp_path / "svc", persistent=True)
    ep2 = svc2.start()
    try:
        problems, events = with_db(settings.with_(mongo_url=ep2.mongo_url), check)
    finally:
        svc2.stop()
    assert problems == []
    assert events == len(traffic.lines)
