"""Scaling benchmark: the same packed stream through 1 and then 2 worker replicas, side by side.

Each run gets its own topic (4 partitions), group and database on one pair of
embedded services, in two modes:

* ``live``: the workers are started and must all hold partitions (their ``/health``
  lists them) before the clock starts; the clock runs from the first send to the
  last commit, so the producer shares the machine with them.
* ``drain``: the stream is produced first (untimed), then the workers start; the
  clock starts once they all hold partitions and counts only the events the
  partition ledgers gained until the backlog is gone: worker + store capacity.

CPU seconds of every process (workers, broker, store, producer) are read from
``/proc`` to show what the 2 shared cores are spent on.

    python -m benchmarks.scaling --out bench-results/scaling.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import cpu_seconds, embedded, write_results
from benchmarks.hits import realtime_events
from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import EmbeddedServices, free_port
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.audit import audit_database
from pipeline.worker.process import WorkerProcess

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def _assigned(port: int) -> int:
    try:
        body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read())
    except OSError:
        return 0
    return len(body.get("assigned", []))


def _settings_for(base: Settings, name: str) -> Settings:
    settings = base.with_(group_id=f"bench-{name}", db=f"bench_{name}".replace("-", "_"))
    return settings.with_stream(HITS, topic=f"bench-{name}")


def _start_sharing(settings: Settings, workers: int, name: str, poll: float) -> list[WorkerProcess]:
    """Start ``workers`` replicas and wait until together they hold every partition."""
    ports = [free_port() for _ in range(workers)]
    procs = [WorkerProcess(settings.with_(web_port=p), f"{name}-{i}").start() for i, p in enumerate(ports)]
    deadline = time.monotonic() + 120
    while not all(_assigned(p) for p in ports) or sum(_assigned(p) for p in ports) < settings.partitions:
        if time.monotonic() > deadline:
            for w in procs:
                w.terminate()
            raise TimeoutError("workers did not share the partitions")
        time.sleep(poll)
    return procs


def _cpu(procs: list[WorkerProcess], svc: EmbeddedServices) -> dict[str, float]:
    return {w.name: cpu_seconds(w.pid) for w in procs} | {
        n: cpu_seconds(p.pid) for n, p in svc._procs.items()
    }


def run(
    base: Settings, svc: EmbeddedServices, workers: int, events: list[tuple[bytes, bytes]]
) -> dict[str, Any]:
    """Time ``events`` through ``workers`` replicas, from first send to all committed."""
    name = f"{base.db}-scale{workers}"
    settings = _settings_for(base, name)
    asyncio.run(send_lines(settings, settings.topic("hits"), events[:1]))  # creates the topic
    procs = _start_sharing(settings, workers, name, 0.5)
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120, poll=0.2))
        cpu0 = _cpu(procs, svc)
        me0 = time.process_time()
        busy0, total0 = machine_busy()
        started = time.perf_counter()
        asyncio.run(send_lines(settings, settings.topic("hits"), events[1:]))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=900, poll=0.1))
        took = time.perf_counter() - started
        busy1, total1 = machine_busy()
        cpu1 = _cpu(procs, svc)
        cpu = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
        cpu["producer (this process)"] = round(time.process_time() - me0, 2)
    finally:
        for w in procs:
            w.terminate()
    problems = asyncio.run(_audit(settings, events))
    return {
        "workers": workers,
        "events": len(events) - 1,
        "seconds": round(took, 2),
        "events_per_s": round((len(events) - 1) / took),
        "cpu_seconds": cpu,
        "machine_cpu_busy_share": round((busy1 - busy0) / max(1, total1 - total0), 3),
        "exact": not problems,
    }


def drain(
    base: Settings, svc: EmbeddedServices, workers: int, events: list[tuple[bytes, bytes]]
) -> dict[str, Any]:
    """Drain mode: a produced backlog consumed by ``workers`` replicas; ledger events per second."""
    name = f"{base.db}-drain{workers}"
    settings = _settings_for(base, name)
    asyncio.run(send_lines(settings, settings.topic("hits"), events))
    procs = _start_sharing(settings, workers, name, 0.05)
    try:
        cpu0 = _cpu(procs, svc)
        counted0 = asyncio.run(_ledger_events(settings))
        busy0, total0 = machine_busy()
        started = time.perf_counter()
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=900, poll=0.1))
        took = time.perf_counter() - started
        busy1, total1 = machine_busy()
        cpu1 = _cpu(procs, svc)
    finally:
        for w in procs:
            w.terminate()
    problems = asyncio.run(_audit(settings, events))
    measured = len(events) - counted0
    return {
        "workers": workers,
        "events_measured": measured,
        "seconds": round(took, 2),
        "events_per_s": round(measured / took),
        "cpu_seconds": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0},
        "machine_cpu_busy_share": round((busy1 - busy0) / max(1, total1 - total0), 3),
        "exact": not problems,
    }


async def _ledger_events(settings: Settings) -> int:
    from pipeline.ops.ledger import ledger_totals, read_ledger

    client = mongo_client(settings.mongo_url or "")
    try:
        return ledger_totals(await read_ledger(client[settings.db], settings.group_id)).events
    finally:
        await client.close()


async def _audit(settings: Settings, events: list[tuple[bytes, bytes]]) -> list[str]:
    truth: Counter[tuple[str, str, int]] = Counter()
    for line, _ in events:
        e = orjson.loads(line)
        truth[(e["site"], e["page"], int(e["ts"] // 60))] += 1
    return await audit_database(settings, truth)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=2, help="repetitions of each case (order alternates)")
    ap.add_argument("--out", default="bench-results/scaling.json")
    args = ap.parse_args()
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "events": args.events,
        "runs": [],
    }
    events = realtime_events(args.events, seed=3)
    with embedded("preagg-scaling-") as (base, svc):
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for mode, fn in (("live", run), ("drain", drain)):
                for n in order:
                    b = base.with_(group_id=f"r{r}", db=f"r{r}")
                    res = fn(b.with_(home=base.home / f"r{r}"), svc, n, events)
                    res |= {"mode": mode, "round": r}
                    results["runs"].append(res)
                    print(json.dumps(res), flush=True)
        for mode in ("live", "drain"):
            for n in (1, 2):
                rates = [
                    x["events_per_s"] for x in results["runs"] if x["mode"] == mode and x["workers"] == n
                ]
                results[f"{mode}_{n}_median_events_per_s"] = sorted(rates)[len(rates) // 2]
            results[f"{mode}_speedup_2_vs_1"] = round(
                results[f"{mode}_2_median_events_per_s"] / results[f"{mode}_1_median_events_per_s"], 2
            )
    out = write_results(results, args.out)
    print(
        f"2 workers vs 1: live {results['live_speedup_2_vs_1']}x, "
        f"drain {results['drain_speedup_2_vs_1']}x; results in {out}"
    )


if __name__ == "__main__":
    main()
