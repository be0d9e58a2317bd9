"""Real producers on the embedded services: keyless single-event messages, log-shipper replays."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import read_ledger
from pipeline.settings import Settings
from pipeline.testing.audit import audit_database
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import cli, dead_letters, produce, run_worker_to_end, with_db

pytestmark = pytest.mark.integration


def _audit(settings: Settings, truth: Counter[tuple[str, str, int]]) -> tuple[list[str], dict[str, int]]:
    """The audit's mismatches, and the events each partition's ledger counted."""

    async def per_partition(db):  # type: ignore[no-untyped-def]
        return {
            f"{d['topic']}[{d['partition']}]": d.get("events", 0)
            for d in await read_ledger(db, settings.group_id)
        }

    counted: dict[str, int] = with_db(settings, per_partition)
    return asyncio.run(audit_database(settings, truth)), counted


def test_keyless_single_events_over_all_partitions_with_three_workers(settings: Settings) -> None:
    """Events of one page arrive on every partition and reach three workers: counts stay exact."""
    traffic = generate(6_000, end=time.time(), days=1, seed=21, bad_share=0, pages_per_site=5)
    keyless = [(line, None) for line, _ in traffic.lines]
    workers = [WorkerProcess(settings, f"keyless-{i}").start() for i in range(3)]
    try:
        asyncio.run(produce(settings, keyless, pack=1))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=240))
    finally:
        codes = [w.terminate() for w in workers]
    assert codes == [0, 0, 0], [w.log_path.read_text()[-2000:] for w in workers]
    problems, per_partition = _audit(settings, traffic.per_minute)
    assert problems == []
    assert len(per_partition) == settings.partitions and min(per_partition.values()) > 0
    assert sum(per_partition.values()) == len(traffic.lines)
    counted_by = [w.name for w in workers if "flushed hits: " in w.log_path.read_text()]
    assert len(counted_by) >= 2, "the partitions should have been shared between workers"


def _access_log(path: Path, lines: int, seed: int) -> tuple[Counter[tuple[str, str, int]], int]:
    """A generated access log; the per-minute truth for site ``shop.example`` and its bad lines."""
    rng = random.Random(seed)
    end = time.time()
    truth: Counter[tuple[str, str, int]] = Counter()
    bad = 0
    out = []
    for i in range(lines):
        if i % 97 == 13:
            out.append(f"garbage line {i} without a request")
            bad += 1
            continue
        ts = int(end - rng.uniform(0, 2 * 86_400))
        page = f"/p/{rng.randrange(30)}"
        when = datetime.fromtimestamp(ts, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")
        agent = rng.choice(["Mozilla/5.0 Firefox/120.0", "curl/8.0", "Googlebot/2.1"])
        out.append(
            f'10.0.0.{i % 250} - - [{when}] "GET {page} HTTP/1.1" 200 {rng.randrange(9999)} "-" "{agent}"'
        )
        truth[("shop.example", page, ts // 60)] += 1
    path.write_text("\n".join(out) + "\n")
    return truth, bad


def test_shipper_replays_count_exactly_what_the_bare_log_holds(settings: Settings, tmp_path: Path) -> None:
    """The same generated log sent bare and as Filebeat, Vector and Fluent Bit send it, keyless, one
    line per message, on one topic read in ``auto`` format: each copy counted exactly once."""
    log = tmp_path / "access.log"
    truth, bad = _access_log(log, 2_000, seed=5)
    s = settings.with_stream(
        HITS, format="auto", site_field="host", site_map=("web-*=shop.example",), site="shop.example"
    )
    for send_as in ("line", "filebeat", "vector", "fluentbit"):
        out = cli(s, "produce", "hits", str(log), "--as", send_as, "--host", "web-7")
        assert f"sent {2_000} events in {2_000} messages" in out, out
    run_worker_to_end(s, "replay", timeout=240)
    problems, per_partition = _audit(s, Counter({k: 4 * n for k, n in truth.items()}))
    assert problems == []
    assert sum(per_partition.values()) == 4 * 2_000
    letters = dead_letters(s)
    assert len(letters) == 4 * bad and {d["reason"] for d in letters} == {"clf"}
    # A page's chart through the CLI: four copies of the bare log's count for that page.
    page = "/p/3"
    want = 4 * sum(n for (_, p, _), n in truth.items() if p == page)
    shown = cli(
        s,
        "query",
        "hits",
        "--site",
        "shop.example",
        "--page",
        page,
        "--from",
        "now-3d",
        "--by",
        "day",
        "--json",
    )
    assert sum(row["hits"] for row in json.loads(shown)) == want
