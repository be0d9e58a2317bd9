"""Issue 42's wedge, reproduced (``make drill-stop-together``): two workers stopped at once, then a third.

Each run, on its own topic, group and database of one pair of embedded services: worker A
counts a first stream, worker B joins later (a rebalance), both get SIGTERM at the same
instant (what ``kill %1 %2`` does), then worker C starts and a second stream is sent. A run
*recovers* when C counts both streams exactly within ``--wait`` seconds; otherwise it is
*wedged* (C never given a partition: the embedded broker's group after two LeaveGroups at
once). The drill prints each run and the count of each outcome; it is a reproduction of an
open defect, not a test (the test suite would fail about half the time until it is fixed).

    python -m benchmarks.stop_together --runs 4 --out bench-results/stop_together.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from collections import Counter
from typing import Any

from benchmarks.common import drill_settings, embedded, write_results
from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.command import on_db
from pipeline.testing.audit import audit_hits
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess


def run_once(settings: Settings, wait: float) -> dict[str, Any]:
    """One run: ``recovered`` with its seconds, or ``wedged``."""
    topic = settings.topic("hits")
    first = generate(600, end=time.time(), days=1, seed=421, bad_share=0.0)
    second = generate(600, end=time.time(), days=1, seed=422, bad_share=0.0)
    a = WorkerProcess(settings, "a").start()
    b = WorkerProcess(settings, "b")
    try:
        asyncio.run(send_lines(settings, topic, first.lines, 1))
        asyncio.run(wait_caught_up(settings, [topic], timeout=180))
        b.start()  # joins later: a rebalance
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "ready: topics" not in b.log_path.read_text():
            time.sleep(0.5)
        time.sleep(8)  # the rebalance done: both hold partitions
    finally:
        for w in (a, b):  # the same instant
            if w.proc is not None and w.alive():
                os.kill(w.proc.pid, signal.SIGTERM)
        a.terminate()
        b.terminate()
    c = WorkerProcess(settings, "c", restart=True).start()
    started = time.monotonic()
    try:
        asyncio.run(send_lines(settings, topic, second.lines, 1))
        asyncio.run(wait_caught_up(settings, [topic], timeout=wait))
        took = time.monotonic() - started
    except TimeoutError:
        return {"outcome": "wedged", "waited_s": wait}
    finally:
        c.terminate()
    truth = first.per_minute + second.per_minute
    problems = on_db(settings, lambda db: audit_hits(db, truth, hits_fields(settings.schema)))
    return {
        "outcome": "recovered" if not problems else "miscounted",
        "seconds": round(took, 1),
        "problems": problems[:5],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--wait", type=float, default=300.0, help="seconds C gets to count the second stream")
    ap.add_argument("--out", default="bench-results/stop_together.json")
    args = ap.parse_args()
    rows = []
    with embedded("preagg-stop-together-", partitions=3) as (base, _):
        for i in range(args.runs):
            row = run_once(drill_settings(base, f"run-{i}", f"st-{i}"), args.wait)
            rows.append(row)
            print(f"run {i}: {row}", flush=True)
    outcomes = Counter(r["outcome"] for r in rows)
    print(dict(outcomes))
    write_results({"runs": rows, "outcomes": dict(outcomes)}, args.out)


if __name__ == "__main__":
    main()
