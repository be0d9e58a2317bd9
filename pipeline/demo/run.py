"""``preagg demo``: embedded services, generated (or replayed) traffic, one worker, a summary."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.demo.live import live
from pipeline.files import Accepted
from pipeline.kafka.producer import produce_records
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.files import read_hits
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import busiest_page, hits_series
from pipeline.kinds.hits.query_props import prop_counts
from pipeline.kinds.hits.render import plot_png, sparkline
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.services.embedded import EmbeddedServices
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess


def run_demo(
    base: Settings,
    events: int,
    files: list[str],
    fmt: str,
    site: str | None,
    chart: Path,
    serve: bool = False,
) -> int:
    """Run the whole demo; returns a process exit code (0 when counts are exact).

    ``serve``: then keep the services up with a worker, live traffic and the dashboard until Ctrl-C.
    """
    home = Path(tempfile.mkdtemp(prefix="preagg-demo-"))
    print(f"starting embedded Kafka (Tansu) and MongoDB (SecantusDB) under {home} ...")
    services = EmbeddedServices(home)
    try:
        endpoints = services.start()
        settings = for_embedded(base.with_(home=home, kafka_url=None, mongo_url=None), endpoints)
        print(f"  kafka {endpoints.kafka_url}   mongodb {endpoints.mongo_url}")
        rc = asyncio.run(_demo(settings, events, files, fmt, site, chart))
        if not serve:
            print("\nthe same data in a browser, live: `make dashboard` (preagg demo --serve)")
            return rc
        asyncio.run(live(settings))
        return rc
    finally:
        services.stop()
        print(f"services stopped; logs were in {home / 'logs'}")
        shutil.rmtree(home, ignore_errors=True)


async def _demo(
    settings: Settings, events: int, files: list[str], fmt: str, site: str | None, chart: Path
) -> int:
    now = time.time()
    traffic = None
    if files:
        decoder = HITS.decoder(settings, settings.of(HITS))
        records = list(read_hits(files, fmt, decoder, site))
        expected: int | None = sum(isinstance(r, Accepted) for r in records)
        print(f"replaying {len(records)} lines from {', '.join(files)}")
    else:
        traffic = generate(events, end=now, props=True)
        records = [Accepted(line, key) for line, key in traffic.lines]
        expected = traffic.valid
        print(
            f"generated {traffic.valid} hits on 3 sites over 3 days (5% late, out of order) "
            f"and {sum(traffic.bad.values())} bad lines {dict(traffic.bad)}"
        )
    summary = await produce_records(settings, settings.topic("hits"), records)
    print(summary.text())

    worker = WorkerProcess(settings, "demo-worker").start()
    started = time.monotonic()
    try:
        await wait_caught_up(settings, [settings.topic("hits")], timeout=600)
        took = time.monotonic() - started
    finally:
        worker.terminate()
    client = mongo_client(settings.mongo_url or "")
    try:
        rc = await _report(
            client[settings.db], settings.group_id, expected, summary.sent, took, chart, now, settings.schema
        )
        if traffic is not None and traffic.props:
            rc = max(rc, await _props_report(client[settings.db], traffic.props, now, settings.schema))
        return rc
    finally:
        await client.close()


async def _report(
    db: AsyncDatabase[dict[str, Any]],
    group: str,
    expected: int | None,
    sent: int,
    took: float,
    chart: Path,
    now: float,
    mode: str,
) -> int:
    f = hits_fields(mode)
    counted = 0
    async for d in db[f.monthly.collection].find({}, {f.monthly.total: 1}):
        counted += d[f.monthly.total]
    daily_docs = await db[f.daily.collection].count_documents({})
    monthly_docs = await db[f.monthly.collection].count_documents({})
    rejected = ledger_totals(await read_ledger(db, group)).rejected
    print("\n== summary")
    print(f"events sent           {sent}")
    print(
        f"hits counted          {counted}"
        + (
            f"  (expected {expected}: {'exact' if counted == expected else 'MISMATCH'})"
            if expected is not None
            else ""
        )
    )
    print(f"dead-lettered         {sum(rejected.values())} {rejected}")
    print(f"documents             {daily_docs} daily, {monthly_docs} monthly")
    print(
        f"worker time           {took:.1f}s from start to caught up "
        f"({sent / took:,.0f} events/s incl. start-up)"
    )
    top = await busiest_page(db, f)
    if top:
        site, page = top
        end = datetime.fromtimestamp(now, UTC)
        latest = await db[f.daily.collection].find_one(
            {f"{f.daily.metadata}.{f.daily.site}": site, f"{f.daily.metadata}.{f.daily.page}": page},
            sort=[(f"{f.daily.metadata}.{f.daily.date}", -1)],
        )
        if latest is not None:  # a replayed file may be years old: chart its last days
            last_day = latest[f.daily.metadata][f.daily.date].replace(tzinfo=UTC)
            end = min(end, last_day + timedelta(days=1) - timedelta(minutes=1))
        hourly = await hits_series(db, site, page, end - timedelta(days=3), end, "hour", f)
        last_hour = await hits_series(db, site, page, end - timedelta(minutes=59), end, "minute", f)
        print(f"\n== busiest page: {site}{page}")
        print(f"hits per hour, last 3 days ({sum(n for _, n in hourly)} hits):")
        print("  " + sparkline([n for _, n in hourly]))
        print(f"hits per minute, last 60 minutes ({sum(n for _, n in last_hour)} hits):")
        print("  " + sparkline([n for _, n in last_hour], width=60))
        plot_png(hourly, chart, f"{site}{page}: hits per hour (UTC)")
        print(f"chart written to {chart}")
    return 0 if expected is None or counted == expected else 1


async def _props_report(
    db: AsyncDatabase[dict[str, Any]], truth: Counter[tuple[str, str, str]], now: float, mode: str
) -> int:
    """Custom property counts of the busiest site, read back through the name store, against the truth."""
    site = Counter({s: n for (s, _, _), n in truth.items()}).most_common(1)[0][0]
    end = datetime.fromtimestamp(now, UTC).date()
    rows = await prop_counts(db, site, None, end - timedelta(days=4), end, fields=hits_fields(mode))
    got = {(r.name, r.value): r.count for r in rows}
    want = {(n, v): c for (s, n, v), c in truth.items() if s == site}
    print(f"\n== custom properties of {site} (name store, {mode} schema)")
    for r in rows:
        print(f"  {r.name:<8} {r.value:<8} {r.count:>7}")
    print(f"property counts       {'exact' if got == want else 'MISMATCH'} ({len(want)} name/value pairs)")
    return 0 if got == want else 1
