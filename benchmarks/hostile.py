"""Figures of the hostile-input fixes (``make bench-hostile``): name-store bursts, the API's load bound.

1. **New sites with new properties.** 100 hits, each from a new site with 32 new property
   names, then 50 more: the flush durations a worker logs, and the time until an
   unrelated site's hit is counted. With ``--baseline TREE`` the same on another
   checkout's worker, side by side in one run (each on a database of its own).
2. **Concurrent API requests.** 32 clients asking a site's 30-day hourly series at once,
   against ``preagg serve`` with ``PREAGG_SERVE_CONCURRENCY`` 4 and 64: answers per
   second, latency, the share refused with 503 + ``Retry-After``, and the flush time of
   a worker counting meanwhile.

    python -m benchmarks.hostile --out bench-results/hostile.json [--baseline ../old-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import re
import statistics
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from benchmarks.common import embedded, header, step, write_results
from pipeline.kafka.producer import send_lines
from pipeline.kinds import named
from pipeline.kinds.hits.files import hit_key
from pipeline.ops.lag import wait_caught_up
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

FLUSHED = re.compile(r"flushed hits: (\d+) events.* in ([0-9.]+)s")


def burst_lines(sites: int, props: int, seed: int, prefix: str) -> list[tuple[bytes, bytes]]:
    """One hit per new site, each with ``props`` property names never seen before."""
    rng = random.Random(seed)
    now = time.time()
    out = []
    for i in range(sites):
        site = f"{prefix}-{i}.example"
        event = {
            "site": site,
            "page": "/",
            "ts": now - rng.uniform(0, 600),
            "props": {f"{prefix}p{i}-{j}": f"v{rng.randrange(5)}" for j in range(props)},
        }
        out.append((orjson.dumps(event), hit_key(site, "/")))
    return out


def name_store_burst(base: Settings, tree: Path | None, label: str) -> dict[str, Any]:
    """Flush durations of a worker taking 100, then 50, events from new sites with 32 new names each."""
    settings = named(base, f"burst-{label}")
    topic = settings.topic("hits")
    worker = WorkerProcess(settings, f"burst-{label}", tree=tree).start()
    try:
        asyncio.run(
            send_lines(
                settings, topic, [(b'{"site":"warm.example","page":"/","ts":%d}' % time.time(), b"w")], 1
            )
        )
        asyncio.run(wait_caught_up(settings, [topic], timeout=300))
        began = time.monotonic()
        asyncio.run(send_lines(settings, topic, burst_lines(100, 32, 1, f"{label}a"), 1))
        asyncio.run(send_lines(settings, topic, burst_lines(50, 32, 2, f"{label}b"), 1))
        asyncio.run(
            send_lines(
                settings, topic, [(b'{"site":"other.example","page":"/","ts":%d}' % time.time(), b"o")], 1
            )
        )
        asyncio.run(wait_caught_up(settings, [topic], timeout=900))
        counted = time.monotonic() - began
    finally:
        worker.terminate()
    flushes = [(int(n), float(s)) for n, s in FLUSHED.findall(worker.log_path.read_text())]
    burst = [s for n, s in flushes if n > 0][1:]  # the warm-up flush first
    return {
        "tree": str(tree) if tree else "this",
        "flushes": len(burst),
        "max_flush_seconds": round(max(burst, default=0.0), 2),
        "flush_seconds": [round(s, 2) for s in burst],
        "all_counted_seconds": round(counted, 1),
    }


def load_series(settings: Settings) -> None:
    """A site with 30 days of hits on 50 pages (the series the clients ask for)."""
    rng = random.Random(3)
    now = time.time()
    lines = []
    for _ in range(30_000):
        page = f"/p{rng.randrange(50)}"
        ev = {"site": "load.example", "page": page, "ts": now - rng.uniform(0, 30 * 86400)}
        lines.append((orjson.dumps(ev), hit_key("load.example", page)))
    asyncio.run(send_lines(settings, settings.topic("hits"), lines, 100))


def concurrent_requests(
    base: Settings, concurrency: int, clients: int = 32, rounds: int = 5
) -> dict[str, Any]:
    """``clients`` threads asking at once, ``rounds`` times, against a server with ``concurrency`` slots."""
    settings = base.with_(serve_concurrency=concurrency, serve_port=0, query_timeout=10.0)
    server = ServeProcess(settings, name=f"serve-c{concurrency}").start()
    query = urlencode({"site": "load.example", "from": "now-29d", "to": "now", "by": "hour"})
    url = f"{server.url}api/hits?{query}"
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def client() -> None:
        for _ in range(rounds):
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    r.read()
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            with lock:
                latencies.append(time.monotonic() - t0)
                statuses[status] = statuses.get(status, 0) + 1

    try:
        began = time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - began
    finally:
        server.terminate()
    ok = statuses.get(200, 0)
    latencies.sort()
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "answered_200": ok,
        "refused_503": statuses.get(503, 0),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "answers_per_second": round(ok / took, 1),
        "p50_ms": round(statistics.median(latencies) * 1000),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000),
        "seconds": round(took, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results/hostile.json")
    ap.add_argument("--baseline", type=Path, help="another checkout whose worker is measured side by side")
    ap.add_argument("--only", choices=["burst", "api"], help="one of the two measurements")
    args = ap.parse_args()
    results = header("python -m benchmarks.hostile")
    with embedded("preagg-bench-hostile-") as (base, _):
        base = base.with_(flush_interval=0.5)
        if args.only != "api":
            step(results, "burst_this", "name-store burst", lambda: name_store_burst(base, None, "this"))
        if args.baseline is not None and args.only != "api":
            step(
                results,
                "burst_baseline",
                f"name-store burst, {args.baseline}",
                lambda: name_store_burst(base, args.baseline, "base"),
            )
        if args.only == "burst":
            write_results(results, args.out)
            return
        load = named(base, "load")
        load_series(load)
        worker = WorkerProcess(load, "load-worker").start()
        try:
            asyncio.run(wait_caught_up(load, [load.topic("hits")], timeout=600))
            for c in (4, 64):
                step(
                    results,
                    f"api_c{c}",
                    f"32 clients, concurrency {c}",
                    functools.partial(concurrent_requests, load, c),
                )
        finally:
            worker.terminate()
    out = write_results(results, args.out)
    print(f"results in {out}")


if __name__ == "__main__":
    main()
