"""Top pages whatever the arrival order: ``make bench-top-pages``.

Each case runs real workers on the embedded broker and store, with the sealing of top
lists off (``PREAGG_HITS_TOP_PAGES_SEAL_AFTER=0``) so that the lists *as written* can be
measured; the benchmark then seals every period as a worker does
(:func:`pipeline.kinds.hits.sites.seal.seal_period`, timed) and measures again:

- **top-10 agreement** with the exact ranking from the page documents (pages in common,
  and whether the order is the same), over each day and over the whole range;
- the **(other) share**: hits the written lists count under ``(other)`` (what the
  reader of a list-only answer, as before this issue, could not attribute);
- whether :func:`pipeline.kinds.hits.query.top_pages` says its answer is exact, and its
  error bound when not;
- the read's latency (p50, p99).

Cases: the README's access log (``access-logs/apache_logs``, in its own time order),
generated Zipf backfills of 10,000 and 100,000 pages over 3 days shuffled, keyless, two
workers; and a live stream (hits stamped now, one worker, sealing on) sampled while it
runs: the open day is answered with its bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.common import (
    add_data_option,
    data_file,
    embedded,
    header,
    latency_ms,
    use_data,
    write_results,
)
from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import page_totals, top_pages
from pipeline.kinds.hits.sites.caps import OTHER_PAGE
from pipeline.kinds.hits.sites.seal import seal_period
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.names.layout import unescape_key
from pipeline.worker.process import WorkerProcess

F = hits_fields("compact")


def zipf_lines(site: str, pages: int, events: int, days: int, seed: int) -> list[tuple[bytes, None]]:
    """Keyless single events: Zipf pages (s = 1) over ``days`` days ending yesterday, shuffled."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(pages)]
    names = [f"/docs/{i:06d}/{rng.choice(('guide', 'faq', 'notes', 'api'))}" for i in range(pages)]
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - timedelta(days=days)
    chosen = rng.choices(names, weights, k=events)
    out = []
    for page in chosen:
        t = start + timedelta(seconds=rng.randrange(days * 86400))
        out.append((json.dumps({"site": site, "page": page, "ts": t.timestamp()}).encode(), None))
    rng.shuffle(out)
    return out


def count(settings: Settings, workers: int) -> float:
    """Run ``workers`` workers until the group committed the topic; seconds taken."""
    procs = [WorkerProcess(settings, f"top-{i}").start() for i in range(workers)]
    started = time.monotonic()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=1800, poll=0.2))
        return time.monotonic() - started
    finally:
        for p in procs:
            p.terminate()


async def days_of(db: Any, site: str) -> list[date]:
    r = F.rollups.top_daily
    found = await db[r.collection].distinct(f"{r.metadata}.{r.date}", {f"{r.metadata}.{r.site}": site})
    return sorted(d.date() for d in found)


async def other_share(db: Any, site: str) -> float:
    """Hits under ``(other)`` in the site's daily lists, over all its hits."""
    r = F.rollups.top_daily
    other = total = 0
    async for doc in db[r.collection].find({f"{r.metadata}.{r.site}": site}, {r.pages: 1}):
        pages = doc.get(r.pages) or {}
        other += int(pages.get(OTHER_PAGE, 0))
        total += sum(int(n) for n in pages.values())
    return other / total if total else 0.0


async def list_only(db: Any, site: str, first: date, last: date, limit: int) -> list[tuple[str, int]]:
    """The answer before this issue: the daily lists summed, ``(other)`` a row like any page."""
    r = F.rollups.top_daily
    sums: Counter[str] = Counter()
    flt = {
        f"{r.metadata}.{r.site}": site,
        f"{r.metadata}.{r.date}": {
            "$gte": datetime(*first.timetuple()[:3]),
            "$lte": datetime(*last.timetuple()[:3]),
        },
    }
    async for doc in db[r.collection].find(flt, {r.pages: 1}):
        sums.update(
            {k if k == OTHER_PAGE else unescape_key(k): int(n) for k, n in (doc.get(r.pages) or {}).items()}
        )
    return sorted(sums.items(), key=lambda row: (-row[1], row[0]))[:limit]


def agreement(got: list[tuple[str, int]], want: list[tuple[str, int]]) -> dict[str, Any]:
    names = [p for p, _ in want]
    shown = [p for p, _ in got]
    return {"common": len(set(shown) & set(names)), "same_order": shown == names, "same_rows": got == want}


async def measure(db: Any, site: str, reps: int) -> dict[str, Any]:
    """Agreement, exactness and latency for each day and the whole range."""
    days = await days_of(db, site)
    ranges = [(d, d) for d in days] + ([(days[0], days[-1])] if len(days) > 1 else [])
    out: dict[str, Any] = {"other_share": round(await other_share(db, site), 4), "ranges": []}
    for lo, hi in ranges:
        exact = sorted((await page_totals(db, site, lo, hi, None, F)).items(), key=lambda r: (-r[1], r[0]))[
            :10
        ]
        got = await top_pages(db, site, lo, hi, 10, F)
        old = await list_only(db, site, lo, hi, 10)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            await top_pages(db, site, lo, hi, 10, F)
            times.append((time.perf_counter() - t0) * 1000)
        out["ranges"].append(
            {
                "from": lo.isoformat(),
                "to": hi.isoformat(),
                "answer": {**agreement(list(got), exact), "exact": got.exact, "bound": got.bound},
                "lists_alone": agreement([r for r in old if r[0] != OTHER_PAGE], exact)
                | {"other_in_top10": any(r[0] == OTHER_PAGE for r in old)},
                "ms": latency_ms(times),
            }
        )
    return out


async def seal_all(db: Any, site: str, budget: int) -> dict[str, Any]:
    """Seal every day and month of ``site`` as a worker does; seconds per period."""
    days = await days_of(db, site)
    periods = [(site, "d", d.toordinal()) for d in days] + [
        (site, "m", m.toordinal()) for m in sorted({d.replace(day=1) for d in days})
    ]
    times: list[float] = []
    outcomes: Counter[str] = Counter()
    for period in periods:
        t0 = time.perf_counter()
        outcomes[await seal_period(db, F, period, budget)] += 1
        times.append((time.perf_counter() - t0) * 1000)
    return {"periods": len(periods), "outcomes": dict(outcomes), "ms": latency_ms(times)}


def backfill_case(
    base: Settings, name: str, site: str, lines: list[Any] | Path, workers: int, reps: int
) -> dict[str, Any]:
    """Events (or an access log, produced as the README does) counted, measured, sealed, measured."""
    settings = base.with_(group_id=f"g-{name}", db=f"top_{name}").with_stream(
        HITS, topic=f"top-{name}", top_pages_seal_after=0.0
    )
    if isinstance(lines, Path):
        cmd = [
            sys.executable,
            "-m",
            "pipeline",
            "produce",
            "hits",
            str(lines),
            "--format",
            "clf",
            "--site",
            site,
        ]
        subprocess.run(cmd, env={**os.environ, **settings.to_env()}, check=True, capture_output=True)
        events = sum(1 for line in lines.read_bytes().splitlines() if line.strip())
    else:
        asyncio.run(send_lines(settings, settings.topic("hits"), lines, 1))
        events = len(lines)
    seconds = count(settings, workers)

    async def run() -> dict[str, Any]:
        client = mongo_client(settings.mongo_url or "")
        try:
            db = client[settings.db]
            written = await measure(db, site, reps)
            sealing = await seal_all(db, site, settings.of(HITS).top_pages_bytes)
            sealed = await measure(db, site, reps)
            return {"as_written": written, "sealing": sealing, "sealed": sealed}
        finally:
            await client.close()

    counted = {"case": name, "events": events, "workers": workers, "count_seconds": round(seconds, 1)}
    return {**counted, **asyncio.run(run())}


def live_case(base: Settings, pages: int, rate: int, seconds: int, reps: int) -> dict[str, Any]:
    """A live Zipf stream stamped now through one worker (sealing on): the open day sampled every 5 s."""
    settings = base.with_(group_id="g-live", db="top_live").with_stream(HITS, topic="top-live")
    site = "live.test"
    rng = random.Random(7)
    names = [f"/live/{i:06d}" for i in range(pages)]
    weights = [1 / (i + 1) for i in range(pages)]
    # the busy pages change halfway: the second half's busiest arrive after the budget is spent
    second = names[pages // 2 :] + names[: pages // 2]
    warm = [(json.dumps({"site": site, "page": "/", "ts": time.time()}).encode(), None)]
    asyncio.run(send_lines(settings, settings.topic("hits"), warm, 1))  # the topic, and a warm worker
    worker = WorkerProcess(settings, "top-live").start()
    samples = []
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=300, poll=0.2))

        async def stream() -> None:
            client = mongo_client(settings.mongo_url or "")
            db = client[settings.db]
            started = time.monotonic()
            sent = 0
            next_sample = started + 5
            try:
                while (now := time.monotonic()) - started < seconds:
                    which = names if now - started < seconds / 2 else second
                    batch = [
                        (json.dumps({"site": site, "page": p, "ts": time.time()}).encode(), None)
                        for p in rng.choices(which, weights, k=rate // 10)
                    ]
                    await send_lines(settings, settings.topic("hits"), batch, 1)
                    sent += len(batch)
                    if now >= next_sample:
                        next_sample += 5
                        today = datetime.now(UTC).date()
                        got = await top_pages(db, site, today, today, 10, F)
                        exact = await page_totals(db, site, today, today, None, F)
                        want = sorted(exact.items(), key=lambda r: (-r[1], r[0]))[:10]
                        old = [r for r in await list_only(db, site, today, today, 10) if r[0] != OTHER_PAGE]
                        samples.append(
                            {
                                "t": round(now - started),
                                "counted": sum(exact.values()),
                                "answer": {
                                    **agreement(list(got), want),
                                    "exact": got.exact,
                                    "bound": got.bound,
                                },
                                "lists_alone": agreement(old, want),
                                "other_share": round(await other_share(db, site), 4),
                            }
                        )
                    await asyncio.sleep(max(0.0, started + sent / rate - time.monotonic()))
            finally:
                await client.close()

        asyncio.run(stream())
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=300, poll=0.2))
        time.sleep(settings.of(HITS).top_pages_seal_after + 3)  # the day settles: the worker seals it

        async def settled() -> dict[str, Any]:
            client = mongo_client(settings.mongo_url or "")
            try:
                return await measure(client[settings.db], site, reps)
            finally:
                await client.close()

        after = asyncio.run(settled())
    finally:
        worker.terminate()
    return {
        "case": "live",
        "pages": pages,
        "rate": rate,
        "seconds": seconds,
        "samples": samples,
        "settled": after,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_data_option(ap)
    ap.add_argument("--sizes", default="10000,100000", help="pages of the Zipf backfills")
    ap.add_argument("--events", type=int, default=200_000, help="events of each Zipf backfill")
    ap.add_argument("--reps", type=int, default=20, help="timed reads per range")
    ap.add_argument("--live-seconds", type=int, default=60, help="length of the live stream (0: none)")
    ap.add_argument("--live-rate", type=int, default=500, help="events per second of the live stream")
    ap.add_argument("--cases", default="readme,zipf,live", help="which cases to run")
    ap.add_argument("--out", default="bench-results/top_pages.json")
    args = ap.parse_args()
    use_data(args.data)
    results: dict[str, Any] = {**header(" ".join(sys.argv)), "cases": []}
    with embedded("preagg-top-", partitions=4) as (base, _):
        log = data_file("access-logs/apache_logs")
        cases = set(args.cases.split(","))
        if "readme" not in cases:
            pass
        elif log.exists():
            results["cases"].append(backfill_case(base, "readme_log", "semicomplete.com", log, 1, args.reps))
            print(json.dumps(results["cases"][-1]), flush=True)
        else:
            print(f"{log} is missing: the README's case is left out", file=sys.stderr)
        for size in (int(s) for s in args.sizes.split(",") if "zipf" in cases):
            site = f"zipf{size}.test"
            lines = zipf_lines(site, size, args.events, 3, seed=size)
            results["cases"].append(backfill_case(base, f"zipf_{size}", site, lines, 2, args.reps))
            print(json.dumps(results["cases"][-1]), flush=True)
        if args.live_seconds and "live" in cases:
            results["cases"].append(live_case(base, 10_000, args.live_rate, args.live_seconds, args.reps))
            print(json.dumps(results["cases"][-1]), flush=True)
    write_results(results, args.out)


if __name__ == "__main__":
    main()
