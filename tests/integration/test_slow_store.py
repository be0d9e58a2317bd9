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
from typing import Any

import pytest

from pipeline.kinds import named
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.services.embedded import EmbeddedServices, free_port
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings
from pipeline.testing.audit import audit_hits
from pipeline.testing.traffic import generate
from pipeline.worker.exits import EXIT_SHUTDOWN_DEADLINE
from pipeline.worker.process import WorkerProcess

from .helpers import produce, with_db

pytestmark = pytest.mark.integration

BOUND = 400
PACK = 20


def scrape(port: int) -> dict[str, float]:
    """Unlabelled-by-partition gauges of the worker's /metrics, by series name: the highest of the
    hits flushers' (the pages' and the site rollups', ``hits@sites``, which reads the records first
    and so may be the one that waits)."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("preagg_") and ('stream="hits"' in line or 'stream="hits@sites"' in line):
            name, value = line.rsplit(" ", 1)
            key = name.split("{")[0]
            out[key] = max(out.get(key, float(value)), float(value))
    return out


def health(port: int, path: str = "/health/ready") -> int:
    return ready(port, path)[0]


def ready(port: int, path: str = "/health/ready") -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        assert body["ok"] is False
        return e.code, body
    except OSError:
        return 0, {}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_store_down_20s_pauses_at_bound_rebalances_then_resumes_exactly(tmp_path: Path) -> None:
    """The store stops, and a second worker stops during the outage: the group still rebalances.

    The second worker cannot commit; it leaves the group at its shutdown deadline
    (exit 76, LeaveGroup sent). The first worker's revoke cannot commit its batches
    either: it drops them (unacked) after half the rebalance timeout instead of waiting
    for the store, so it rejoins and takes every partition while the store is down.
    Nobody is evicted or fenced (no exit 75), and the counts are exact once it is back.
    """
    svc = EmbeddedServices(tmp_path / "svc", persistent=True)
    endpoints = svc.start()
    tag = uuid.uuid4().hex[:8]
    web, web2 = free_port(), free_port()
    settings = for_embedded(
        named(
            Settings(
                partitions=3,
                home=tmp_path,
                flush_interval=0.5,
                session_timeout=10.0,
                max_pending_keys=BOUND,
                web_port=web,
                health_max_flush_age=5.0,
                rebalance_timeout=10.0,  # the revoke drain is bounded at 5 s
            ),
            tag,
        ),
        endpoints,
    )
    traffic = generate(30_000, end=time.time(), days=1, seed=21, bad_share=0.005)
    first, rest = traffic.lines[:3_000], traffic.lines[3_000:]
    worker = WorkerProcess(settings, "outage").start()
    second = WorkerProcess(settings.with_(web_port=web2, shutdown_timeout=3.0), "outage-2").start()
    rc2: list[int] = []
    try:
        asyncio.run(produce(settings, first, PACK))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120))
        while not (ready(web)[1].get("assigned") and ready(web2)[1].get("assigned")):
            time.sleep(0.5)  # both members hold partitions
        rss_before = rss_kib(worker.pid)

        svc.stop_store()
        down_at = time.monotonic()
        producer = threading.Thread(target=lambda: asyncio.run(produce(settings, rest, PACK)))
        producer.start()
        samples = []
        statuses = set()
        live = set()
        alone: list[float] = []  # seconds into the outage at which the first worker held every partition
        stopper: threading.Thread | None = None
        # 20 s of outage; longer while the stopped worker's partitions are not the first's yet:
        # on the embedded broker a stopping *leader* sends no LeaveGroup (its session ends it,
        # pipeline/worker/rebalance.py), so the rebalance waits a session timeout more.
        while time.monotonic() - down_at < 20 or (not alone and time.monotonic() - down_at < 60):
            time.sleep(1.0)
            m = scrape(web)
            samples.append((m["preagg_pending_keys"], m["preagg_backpressure_paused"], rss_kib(worker.pid)))
            statuses.add(health(web))
            live.add(health(web, "/health/live"))
            if stopper is None and m["preagg_backpressure_paused"]:
                # Scale down while the first worker waits for the store with batches uncommitted.
                stopper = threading.Thread(target=lambda: rc2.append(second.terminate()))
                stopper.start()
            held = [p for p in ready(web)[1].get("assigned", []) if p.startswith(settings.topic("hits"))]
            if len(held) == 3:
                alone.append(round(time.monotonic() - down_at, 1))
        producer.join()
        svc.start_store()
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
        assert health(web) == 200 and health(web, "/health") == 200
        assert stopper is not None
        stopper.join()
    finally:
        rc = worker.terminate()
        if not rc2:
            rc2.append(second.terminate())
        svc.stop()
    log = worker.log_path.read_text()
    assert rc == 0, log[-3000:]
    assert rc2 == [EXIT_SHUTDOWN_DEADLINE], second.log_path.read_text()[-3000:]
    said = second.log_path.read_text()
    # Left by preagg, or by aiokafka's own stop of the consumer before it (then "not running").
    left = ("left the consumer group", "not leaving the group as its leader", "its consumer is not running")
    assert any(line in said for line in left), said[-3000:]
    # Rebalanced while the store was down: the first worker held every partition before it came back.
    assert alone, "the group did not rebalance during the outage"
    assert "rebalance: uncommitted batches not committed within 5s" in log, log[-3000:]
    assert "exiting (status 75)" not in log

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
    assert "backpressure: " in log

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
