"""Local calendars and retention, side by side in one run on the embedded services.

1. The same 60 days of hits for a site in UTC and a site in Europe/Berlin (across the
   October DST change when the window holds it): drain time through one worker each,
   bytes per daily document, and chart reads (a month by day, a day by hour) p50/p99.
2. ``preagg retention run`` with the default tiers (minutes 30 days, hours 400) on
   those 60 days: the statements, their time, bytes of the daily collection and per
   daily document before and after, and a second run (nothing left to prune).

    python -m benchmarks.calendar --out bench-results/calendar.json
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import bson
import orjson
from pymongo import AsyncMongoClient, MongoClient

from benchmarks.common import (
    coll_stats,
    embedded,
    header,
    latency_ms,
    step,
    timed_worker_run,
    write_results,
)
from pipeline.kinds import named
from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import hits_series
from pipeline.kinds.hits.sites.prune import run_retention
from pipeline.kinds.hits.sites.store import SiteConfig, plan_zone_change, save_zones
from pipeline.kinds.hits.sites.tiers import Tiers
from pipeline.settings import Settings

SITES = {"utc.example": "UTC", "berlin.example": "Europe/Berlin"}
F = hits_fields()


def events(site: str, n: int, days: int, seed: int) -> list[tuple[bytes, bytes]]:
    """``n`` hits over the last ``days`` days, in time order: 100 Zipf pages, busier by day than by night."""
    rng = random.Random(seed)
    now = time.time() - 120
    pages = [f"/p/{i}" for i in range(100)]
    weights = [1 / (i + 1) for i in range(100)]
    times: list[float] = []
    while len(times) < n:
        t = now - days * 86400 * rng.random()
        if rng.random() < 0.5 * (1 + math.cos((t % 86400) / 86400 * 2 * math.pi)):
            continue  # fewer at night (UTC): a day's shape
        times.append(t)
    out = []
    for t in sorted(times):  # in time order, as a backfill of logs arrives
        page = rng.choices(pages, weights)[0]
        out.append((orjson.dumps({"site": site, "page": page, "ts": round(t, 3)}), hit_key(site, page)))
    return out


def doc_bytes(db: Any, site: str | None = None, before: datetime | None = None) -> dict[str, Any]:
    """Count and BSON bytes of daily documents (of a site; of days before ``before``)."""
    flt: dict[str, Any] = {}
    if site:
        flt[f"{F.daily.metadata}.{F.daily.site}"] = site
    if before:
        flt[f"{F.daily.metadata}.{F.daily.date}"] = {"$lt": before}
    sizes = [len(bson.encode(d)) for d in db[F.daily.collection].find(flt)]
    return {
        "documents": len(sizes),
        "bytes": sum(sizes),
        "bytes_per_document": round(sum(sizes) / len(sizes)) if sizes else 0,
    }


async def chart_reads(url: str, db_name: str, site: str, reps: int) -> dict[str, Any]:
    """p50/p99 of a month by day and a (DST) day by hour of ``site``."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    db = client[db_name]
    today = datetime.now(UTC)
    month = datetime(today.year, today.month, 1)
    day = datetime(2026, 10, 25) if today - datetime(2026, 10, 25, tzinfo=UTC) < timedelta(days=58) else None
    day = day or datetime(today.year, today.month, today.day) - timedelta(days=1)
    out: dict[str, Any] = {}
    try:
        for name, args in (
            ("month_by_day", (month, (month + timedelta(days=32)).replace(day=1) - timedelta(days=1), "day")),
            ("day_by_hour", (day, day + timedelta(hours=23, minutes=59), "hour")),
        ):
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                rows = await hits_series(db, site, None, args[0], args[1], args[2], F)  # type: ignore[arg-type]
                times.append((time.perf_counter() - t0) * 1000)
            out[name] = {**latency_ms(times), "buckets": len(rows), "hits": sum(n for _, n in rows)}
        out["day_by_hour"]["day"] = day.date().isoformat()
    finally:
        await client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=300_000, help="per site")
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default="bench-results/calendar.json")
    args = ap.parse_args()
    results: dict[str, Any] = header(
        "python -m benchmarks.calendar " + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "out")
    )
    with embedded("preagg-bench-calendar-") as (base, _):
        settings: Settings = named(base, "calendar")
        url = settings.mongo_url or ""
        sync: MongoClient[dict[str, Any]] = MongoClient(url)
        db = sync[settings.db]

        async def zones() -> None:
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
            try:
                for site, zone in SITES.items():
                    current = SiteConfig(site)
                    await save_zones(
                        client[settings.db],
                        current,
                        plan_zone_change(current, zone, None, False, time.time(), 300),
                    )
            finally:
                await client.close()

        asyncio.run(zones())
        for i, site in enumerate(SITES):
            evs = events(site, args.events, args.days, seed=16)  # the same times and pages for both

            def drain(site: str = site, evs: list[tuple[bytes, bytes]] = evs, i: int = i) -> dict[str, Any]:
                seconds = timed_worker_run(settings, settings.topic("hits"), evs, f"calendar-{i}")
                return {
                    "events": len(evs),
                    "seconds": round(seconds, 1),
                    "events_per_s": round(len(evs) / seconds),
                }

            step(results, f"drain_{SITES[site]}", f"{site}: {args.days} days of hits through a worker", drain)
        for site, zone in SITES.items():

            def stored(site: str = site) -> dict[str, Any]:
                return doc_bytes(db, site)

            def reads(site: str = site) -> dict[str, Any]:
                return asyncio.run(chart_reads(url, settings.db, site, args.reps))

            step(results, f"bytes_{zone}", f"{site}: daily documents", stored)
            step(results, f"reads_{zone}", f"{site}: chart reads", reads)

        today = datetime.now(UTC).date()
        cutoff = datetime.combine(today - timedelta(days=30), datetime.min.time())

        def sizes() -> dict[str, Any]:
            return {
                "all": doc_bytes(db),
                "older_than_30_days": doc_bytes(db, before=cutoff),
                "coll_stats": coll_stats(db, F.daily.collection),
            }

        step(results, "before_retention", "daily collection before retention", sizes)

        def prune(label: str) -> dict[str, Any]:
            async def run() -> list[Any]:
                client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
                try:
                    return await run_retention(client[settings.db], F, Tiers(30, 400), today, settle=0)
                finally:
                    await client.close()

            t0 = time.perf_counter()
            done = asyncio.run(run())
            return {
                "statements": [{"what": p.what, "documents": p.documents} for p in done],
                "seconds": round(time.perf_counter() - t0, 2),
                "run": label,
            }

        step(results, "retention_run", "preagg retention run (30/400 days)", lambda: prune("first"))
        step(results, "after_retention", "daily collection after retention", sizes)
        step(results, "retention_again", "a second run: nothing left", lambda: prune("second"))
        b, a = results["before_retention"]["all"]["bytes"], results["after_retention"]["all"]["bytes"]
        results["daily_bytes_after_over_before"] = round(a / b, 3) if b else None
        sync.close()
    write_results(results, args.out)


if __name__ == "__main__":
    main()
