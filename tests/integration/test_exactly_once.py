"""Exactly-once on the real services: crashes inside and right after a flush's commit, then a chaos drill.

Every test ends with an audit of every stored counter against the truth
(:func:`pipeline.testing.audit.audit_hits`) and of the partition ledgers' event totals.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.testing.chaos import run_chaos
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import audit_traffic, produce, run_worker_to_end, with_db

pytestmark = pytest.mark.integration


audit = audit_traffic


def crash_at(settings: Settings, fault: str) -> str:
    """Run a worker armed with ``fault`` until it dies of it; return its log."""
    w = WorkerProcess(settings.with_(fault=fault), f"crash-{fault.replace(':', '-')}").start()
    deadline = time.monotonic() + 120
    while w.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    rc = w.terminate()
    log = w.log_path.read_text()
    assert rc == 137, f"worker should have died at {fault} (rc {rc}):\n{log[-3000:]}"
    return log


@pytest.mark.parametrize("fault", ["after-commit:2", "mid-commit:2"])
def test_crash_around_commit_counts_every_event_once(settings: Settings, fault: str) -> None:
    """after-commit: MongoDB has the batch, Kafka's commit never came (the classic double count).
    mid-commit: the transaction was left open on the server and must not count at all."""
    settings = settings.with_(max_pending_keys=300)  # several flushes
    traffic = generate(6_000, end=time.time(), days=1, seed=11, bad_share=0.01)
    asyncio.run(produce(settings, traffic.lines, pack=20))

    log = crash_at(settings, fault)
    assert "fault injection: dying at" in log
    problems, events = audit(settings, traffic)
    assert events < len(traffic.lines), "the crash should leave work for the successor"

    web = free_port()
    w = WorkerProcess(settings.with_(web_port=web), "successor").start()
    try:
        from pipeline.ops.lag import wait_caught_up

        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10).read().decode()
    finally:
        assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    problems, events = audit(settings, traffic)
    assert problems == []
    assert events == len(traffic.lines)
    if fault.startswith("mid-commit"):
        # Idempotent writes: the cut-short flush (daily documents written, monthly not) is
        # written again from its recorded intent, and only what it had not applied counts.
        assert "was cut short; writing its range" in w.log_path.read_text()
        redone = [ln for ln in metrics.splitlines() if ln.startswith("preagg_flushes_redone_total")]
        assert redone and float(redone[0].split()[-1]) >= 1
    if fault.startswith("after-commit"):
        skipped = [
            ln for ln in metrics.splitlines() if ln.startswith("preagg_replayed_messages_skipped_total")
        ]
        assert skipped and float(skipped[0].split()[-1]) > 0, "replayed messages should have been skipped"


def test_chaos_two_workers_random_kills_exact(settings: Settings) -> None:
    """Seeded kill -9 / restart / scale schedule during ingest; every counter exact afterwards."""
    settings = settings.with_(partitions=4, max_pending_keys=2_000)
    lines: list[str] = []
    report = run_chaos(settings, seed=7, events=12_000, duration=25.0, say=lines.append)
    assert report.faults >= 2, lines
    assert report.ok, (report.mismatches, lines)


def test_metrics_and_health_endpoints(settings: Settings) -> None:
    traffic = generate(2_000, end=time.time(), days=1, seed=5, bad_share=0.02)
    asyncio.run(produce(settings, traffic.lines, pack=50))
    web = free_port()
    w = WorkerProcess(settings.with_(web_port=web), "scraped").start()
    try:
        from pipeline.ops.lag import wait_caught_up

        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120))
        time.sleep(1.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10) as r:
            content_type = r.headers["Content-Type"]
            body = r.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/health", timeout=10) as r:
            status, health = r.status, r.read().decode()
    finally:
        assert w.terminate() == 0
    assert content_type.startswith("text/plain")
    for series in (
        'preagg_events_total{stream="hits"}',
        "preagg_rejected_total{",
        'preagg_flushes_total{stream="hits"}',
        'preagg_flush_seconds_bucket{le="0.1",stream="hits"}',
        "preagg_flush_seconds_count",
        'preagg_documents_written_total{stream="hits"}',
        'preagg_pending_keys{stream="hits"}',
        'preagg_seconds_since_last_flush{stream="hits"}',
        'preagg_consumer_lag{partition="0",topic=',
        "preagg_backpressure_paused",
        "preagg_name_store_reads_total",
        "preagg_name_overflow_total",
        'preagg_commit_failures_total{stream="hits"}',
        'preagg_commit_splits_total{stream="hits"}',
        'preagg_commit_unsplittable_total{stream="hits"}',
        'preagg_commit_docs_limit{stream="hits"}',
    ):
        assert series in body, f"{series} missing from:\n{body}"
    events = next(ln for ln in body.splitlines() if ln.startswith('preagg_events_total{stream="hits"}'))
    assert float(events.split()[-1]) == len(traffic.lines)
    assert status == 200 and '"ok": true' in health.replace('"ok":true', '"ok": true')


def test_run_worker_to_end_still_exact(settings: Settings) -> None:
    """The plain path (no faults) through the shared helper: exact, and the ledger agrees."""
    traffic = generate(3_000, end=time.time(), days=1, seed=2, bad_share=0.01)
    asyncio.run(produce(settings, traffic.lines, pack=20))
    run_worker_to_end(settings)
    problems, events = audit(settings, traffic)
    assert problems == [] and events == len(traffic.lines)


def test_store_restored_from_backup_resumes_from_its_positions(settings: Settings) -> None:
    """MongoDB restored to an older backup: Kafka's committed offsets are now ahead of the
    restored positions; the worker points Kafka back, restarts, and recounts the rest once."""
    from pipeline.worker.exits import EXIT_FENCED

    traffic = generate(4_000, end=time.time(), days=1, seed=13, bad_share=0)
    half, third = len(traffic.lines) // 2, len(traffic.lines) - 600
    asyncio.run(produce(settings, traffic.lines[:half], pack=20))
    run_worker_to_end(settings, "first")
    collections = [
        *("hits_daily", "hits_monthly", "hits_site_daily", "hits_site_monthly"),
        *("hits_site_pages_daily", "hits_site_pages_monthly", "preagg_offsets"),
    ]

    async def backup(db):  # type: ignore[no-untyped-def]
        return {c: [d async for d in db[c].find()] for c in collections}

    saved = with_db(settings, backup)
    asyncio.run(produce(settings, traffic.lines[half:third], pack=20))
    run_worker_to_end(settings, "second")

    async def restore(db):  # type: ignore[no-untyped-def]
        for c in collections:
            await db[c].delete_many({})
            await db[c].insert_many(saved[c])

    with_db(settings, restore)
    # Traffic goes on; Kafka's committed offsets ahead of the ledgers show at assignment.
    asyncio.run(produce(settings, traffic.lines[third:], pack=20))
    w = WorkerProcess(settings, "sees-the-gap").start()
    deadline = time.monotonic() + 120
    while w.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    rc = w.terminate()
    log = w.log_path.read_text()
    assert rc == EXIT_FENCED, log[-3000:]
    # Seen at the assignment, or by the first record a flusher takes (with the site rollups
    # flushed apart, theirs may come first): either way Kafka is pointed back at MongoDB.
    assert (
        "Kafka's committed offsets are ahead of what MongoDB counted" in log
        or "Kafka's committed offsets now follow MongoDB's" in log
    ), log[-3000:]
    run_worker_to_end(settings, "resumes")
    problems, events = audit(settings, traffic)
    assert problems == [] and events == len(traffic.lines)
