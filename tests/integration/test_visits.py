"""Visits counted by the workers' visits stage, on the real services: keyless log lines through
``kill -9`` inside flushes and two workers give, per site and day, the visits, bounces, views,
durations and entry and exit pages that the rule computes from the events themselves.

A visits flush writes its counts and open visits first, then the head naming them: killed in
the first phase, its successor plans it again from the head before it (the counts written meet
their marks); killed after the head, its successor finds the head at the flush's end and only
moves the ledger."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter

import orjson
import pytest
from pymongo import MongoClient

from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.testing.visits_truth import Ends, Figures, stored_visits_of, visits_truth
from pipeline.worker.process import WorkerProcess

from .helpers import produce, run_cli, schema_violations
from .test_exactly_once import crash_at

pytestmark = pytest.mark.integration

DAY = 86400.0


def metrics_of(port: int) -> dict[str, float]:
    """A worker's unlabelled series, from its ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return {ln.split()[0]: float(ln.split()[1]) for ln in lines if ln.startswith("preagg_visit")}


def stored(settings: Settings) -> tuple[Figures, Ends]:
    return asyncio.run(stored_visits_of(settings))


def test_visits_are_counted_once_through_kills_and_two_workers_on_keyless_lines(settings: Settings) -> None:
    """Workers killed inside a hits flush and inside both phases of visits flushes, then two
    workers on a keyless backlog of five-day-old hits, then one hit of today (the watermark passes
    every visit): each visit counted once, none split by the partitions' uneven reading."""
    settings = settings.with_(partitions=3, max_pending_keys=400).with_stream(HITS, visits=True)
    now = time.time()
    # In time order per partition (no late hits): the two workers read the partitions unevenly,
    # and the stage's watermark, the slowest source's time, must wait for the slowest.
    traffic = generate(6_000, end=now - 5 * DAY, days=1, seed=41, bad_share=0.01, visitors=300, late_share=0)
    asyncio.run(produce(settings, [(line, None) for line, _ in traffic.lines], pack=1))  # keyless
    topic = settings.of(HITS).visits_topic
    logs = ""
    for fault in (
        f"early-commit:1:{topic}",
        "mid-commit:4",
        f"early-commit:2:{topic}",
        f"mid-commit:2:{topic}",
    ):
        logs += crash_at(settings, fault)
        assert "fault injection: dying at" in logs
    topics = [settings.topic("hits"), topic]
    # Supervised as in production: a worker that finds Kafka's committed offsets ahead of its
    # ledgers after the kills points Kafka back at them and restarts (exit 75, pipeline/worker/guard.py).
    ports = [free_port(), free_port()]
    first = WorkerProcess(settings.with_(web_port=ports[0]), "successor", restart=True).start()
    second: WorkerProcess | None = None
    try:
        second = WorkerProcess(settings.with_(web_port=ports[1]), "joins", restart=True).start()
        asyncio.run(wait_caught_up(settings, topics, timeout=240))
        tick = orjson.dumps({"site": "tick.example", "page": "/", "ts": now, "visitor": "clock"})
        asyncio.run(produce(settings, [(tick, None)], pack=1))
        asyncio.run(wait_caught_up(settings, topics, timeout=240))
        want = visits_truth(traffic)
        deadline = time.monotonic() + 120
        while stored(settings) != want and time.monotonic() < deadline:
            time.sleep(0.5)  # the tick's visits flush may follow the wait by a moment
        scraped = [metrics_of(port) for port in ports]
    finally:
        if second is not None:
            assert second.terminate() == 0, second.log_path.read_text()[-3000:]
        assert first.terminate() == 0, first.log_path.read_text()[-3000:]
    logs += first.log_path.read_text() + (second.log_path.read_text() if second else "")
    redone = [line for line in logs.splitlines() if f"{topic}[" in line and "was cut short" in line]
    assert len(redone) >= 2, "both visits flushes cut short should have been written again"
    figures, pages = stored(settings)
    # The stage's own series are exported by the workers that ran it.
    assert sum(m.get("preagg_visit_hits_total", 0) for m in scraped) > 0, scraped
    assert all("preagg_visits_open" in m and "preagg_visit_late_hits_total" in m for m in scraped), scraped
    assert figures == want[0]
    assert pages == want[1]
    assert sum(f[0] for f in figures.values()) > 300  # visits, not one per person

    # What analysts read: the same figures, final (the watermark passed those days).
    days = sorted(d for s, d in want[0] if s == "shop.example")
    span = ("--site", "shop.example", "--from", str(days[0]), "--to", str(days[-1]))
    rows = json.loads(run_cli(settings, "query", "visits", *span, "--json").stdout)
    assert [(r["t"], r["visits"], r["bounces"], r["views"], r["complete"]) for r in rows] == [
        (str(d), *want[0][("shop.example", d)][:3], True) for d in days
    ]
    entries: Counter[str] = Counter()
    for (site, _day, page, end), n in want[1].items():
        if site == "shop.example" and end == 0:
            entries[page] += n
    top = json.loads(run_cli(settings, "query", "visit-pages", *span, "--limit", "5", "--json").stdout)
    assert [(r["page"], r["entries"]) for r in top] == sorted(
        entries.items(), key=lambda kv: (-kv[1], kv[0])
    )[:5]
    # Every stored document and view row as its JSON Schema says (the state, the views too).
    assert schema_violations(settings) == {}
    with MongoClient(settings.mongo_url) as client:
        rows = client[settings.db]["visit_pages_days"].find({"site": "shop.example"})
        assert sum(r["entries"] for r in rows) == sum(entries.values())
    (total,) = json.loads(run_cli(settings, "query", "visits", *span, "--by", "total", "--json").stdout)
    n = sum(want[0][("shop.example", d)][0] for d in days)
    assert total["visits"] == n and total["views_per_visit"] == round(
        sum(want[0][("shop.example", d)][2] for d in days) / n, 2
    )
