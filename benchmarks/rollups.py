"""Site charts before and after site rollups, by page count; ingest cost; a crawler (``make bench-rollups``).

**Reads.** For sites of 100, 1,000, 10,000 and 100,000 Zipf pages, 30 days of hits
ending now (with custom properties on half of them) are planned by the worker's own
planner (:func:`pipeline.kinds.hits.aggregate.plan_hits`, no page cap) and written as
the worker writes them: page documents and site rollups. Each site chart is then
timed ``--requests`` times, side by side in one run:

- *before*: the reads of the tree before rollups (kept here verbatim): every page
  document of the site in the range, on the (site, date) index;
- *after*: the query functions the CLI, the HTTP API and Grafana call, which read
  only the site rollups.

**Ingest.** One worker drains the same backlog (50 sites × 200 Zipf pages, the issue-28
shape) with this tree and with ``--compare-tree`` (a worktree before rollups):
events/s, document upserts and bytes written per event.

**Crawler.** 1,000,000 hits of distinct URLs on one site in one day through a worker
with the defaults: ``/search?q=<n>`` (query strings dropped) and ``/item/<n>`` (the
page cap): documents and collection sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gc
import itertools
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pymongo
from pymongo import UpdateOne

from benchmarks.common import embedded, header, latency_ms, write_results
from pipeline.core.calendar import EPOCH_ORDINAL
from pipeline.core.series import add_into, next_bucket
from pipeline.kinds.hits.aggregate import plan_hits
from pipeline.kinds.hits.layout import HitsFields, hits_fields, site_filter
from pipeline.kinds.hits.query import _buckets, _items, hits_series, series_query, top_pages
from pipeline.kinds.hits.query_props import prop_counts
from pipeline.kinds.hits.settings import HitsSettings
from pipeline.kinds.hits.sites.caps import PageCaps
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.meta import ensure_indexes
from pipeline.store.statements import update_document

F = hits_fields("compact")
COUNTRIES = ("US", "DE", "FR", "GB", "JP", "BR", "IN")
SLUGS = ("release-notes", "how-to-scale", "pricing-faq", "getting-started", "kafka-tips", "mongo-indexes")


class Keys:
    """Readable property keys (the name store is not what is measured)."""

    def keys(self, site: str, name: str, value: str) -> tuple[str, str]:
        return name, value


def site_counts(
    site: str, pages: int, hits: int, end_minute: int, seed: int
) -> tuple[Counter[tuple[str, str, int]], dict[tuple[str, str, int], Counter[tuple[str, str]]]]:
    """``hits`` over 30 days on ``pages`` Zipf pages (s = 1.05), the last hour busiest; half with props."""
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.05 for r in range(pages)))
    counts: Counter[tuple[str, str, int]] = Counter()
    props: dict[tuple[str, str, int], Counter[tuple[str, str]]] = {}
    span = 30 * 1440
    for i in range(hits):
        rank = bisect.bisect(cum, rng.random() * cum[-1])
        page = f"/blog/2026/{rank:06d}-{SLUGS[rank % len(SLUGS)]}"  # about 33 bytes, as real paths
        minute = end_minute - (rng.randrange(60) if i % 50 == 0 else rng.randrange(span))
        counts[site, page, minute] += 1
        if i % 2:
            props.setdefault((site, page, minute // 15), Counter())["country", rng.choice(COUNTRIES)] += 1
    return counts, props


def write_site(db: Any, counts: Any, props: Any, top_bytes: int) -> dict[str, int]:
    """Plan as a worker does (one flush) and write every upsert; documents per collection."""
    plan = plan_hits(counts, F, props, Keys(), caps=PageCaps(0, top_bytes))
    by: dict[str, list[UpdateOne]] = {}
    for u in plan:
        by.setdefault(u.collection, []).append(UpdateOne(u.filter(), update_document(u), upsert=True))
    for coll, ops in by.items():
        for i in range(0, len(ops), 2000):
            db[coll].bulk_write(ops[i : i + 2000], ordered=False)
    return {c: len(ops) for c, ops in by.items()}


# -- the reads of the tree before rollups, verbatim (page documents, (site, date) index) ------------


async def before_series(db: Any, site: str, start: datetime, end: datetime, by: str) -> int:
    """The old ``hits_series(page=None)``: every page document of the range (UTC site)."""
    from pipeline.core.calendar import UTC_CALENDAR
    from pipeline.kinds.hits.query import local_days

    cal = UTC_CALENDAR
    lo, hi, d0, d1 = local_days(start, end, cal)
    page_fields = HitsFields(F.daily, F.monthly, F.mode)  # no rollups: site_filter over page documents
    coll, flt, proj = series_query(site, None, d0, d1, by, page_fields)  # type: ignore[arg-type]
    acc: dict[int, int] = {}
    async for doc in db[coll].find(flt, proj):
        add_into(acc, _items(doc, by, page_fields))  # type: ignore[arg-type]
    keys = _buckets(by, lo, hi, d0, d1, cal)  # type: ignore[arg-type]
    return sum(acc.get(b, 0) for b in keys)


async def before_top_pages(db: Any, site: str, first: date, last: date) -> list[tuple[str, int]]:
    """The old ``top_pages``: every monthly page document of the range."""
    f = F.monthly
    lo, hi = datetime(first.year, first.month, 1), datetime(last.year, last.month, 1)
    flt = {f"{f.metadata}.{f.site}": site, f"{f.metadata}.{f.date}": {"$gte": lo, "$lte": hi}}
    proj = {f"{f.metadata}.{f.page}": 1, f"{f.metadata}.{f.date}": 1, f.daily: 1, f.total: 1, "_id": 0}
    sums: dict[str, int] = {}
    async for doc in db[f.collection].find(flt, proj):
        month: datetime = doc[f.metadata][f.date]
        page: str = doc[f.metadata][f.page]
        end = next_bucket(month, "month") - timedelta(days=1)
        if first <= month.date() and end.date() <= last:
            n = int(doc.get(f.total, 0))
        else:
            n = sum(
                int(v)
                for d, v in (doc.get(f.daily) or {}).items()
                if first <= month.date().replace(day=int(d)) <= last
            )
        if n:
            sums[page] = sums.get(page, 0) + n
    return sorted(sums.items(), key=lambda r: (-r[1], r[0]))[:10]


async def before_props(db: Any, site: str, first: date, last: date) -> int:
    """The old ``prop_counts(page=None)``: the props of every daily page document of the range."""
    f = F.daily
    flt = site_filter(
        f, site, None, datetime(first.year, first.month, first.day), datetime(last.year, last.month, last.day)
    )
    total = 0
    async for doc in db[f.collection].find(flt, {f.props: 1, "_id": 0}):
        for values in (doc.get(f.props) or {}).values():
            total += sum(int(n) for n in values.values())
    return total


# -- the timing ---------------------------------------------------------------------------------


async def time_charts(
    url: str, dbname: str, site: str, now: datetime, requests: int, sides: tuple[str, ...]
) -> dict[str, Any]:
    """p50/p99 ms of each site chart, before and after, interleaved request by request."""
    client = mongo_client(url, timeout=120)
    db = client[dbname]
    today = now.date()
    naive = now.replace(tzinfo=None)
    first30 = today - timedelta(days=29)
    month_lo = datetime(today.year, today.month, 1)
    charts: dict[str, tuple[Any, Any]] = {
        "real-time chart, 60 min by minute": (
            lambda: before_series(db, site, naive - timedelta(minutes=59), naive, "minute"),
            lambda: hits_series(db, site, None, naive - timedelta(minutes=59), naive, "minute", F),
        ),
        "month by day": (
            lambda: before_series(db, site, month_lo, naive, "day"),
            lambda: hits_series(db, site, None, month_lo, naive, "day", F),
        ),
        "30 days hourly": (
            lambda: before_series(
                db, site, datetime(first30.year, first30.month, first30.day), naive, "hour"
            ),
            lambda: hits_series(
                db, site, None, datetime(first30.year, first30.month, first30.day), naive, "hour", F
            ),
        ),
        "top pages, 30 days": (
            lambda: before_top_pages(db, site, first30, today),
            lambda: top_pages(db, site, first30, today, 10, F),
        ),
        "site properties, 7 days": (
            lambda: before_props(db, site, today - timedelta(days=6), today),
            lambda: prop_counts(db, site, None, today - timedelta(days=6), today, None, F),
        ),
        "Grafana /query, 6 h by minute": (
            lambda: before_series(db, site, naive - timedelta(hours=6), naive, "minute"),
            lambda: hits_series(db, site, None, naive - timedelta(hours=6), naive, "minute", F),
        ),
    }
    out: dict[str, Any] = {}
    try:
        for name, (before, after) in charts.items():
            times: dict[str, list[float]] = {"before": [], "after": []}
            # One side's requests in a block, then the other's: interleaved, each light read
            # paid for the heavy one before it (the client's and the store's memory churn).
            for label, fn in (("before", before), ("after", after)):
                if label not in sides:
                    continue
                gc.collect()
                for i in range(requests + 1):
                    t0 = time.perf_counter()
                    await fn()
                    if i:  # the first is a warm-up
                        times[label].append((time.perf_counter() - t0) * 1000)
            out[name] = {k: latency_ms(v) for k, v in times.items() if v}
            print(f"  {name}: {out[name]}", flush=True)
    finally:
        await client.close()
    return out


def reads(
    settings: Settings, sizes: list[int], requests: int, top_bytes: int, sides: tuple[str, ...]
) -> dict[str, Any]:
    """Write the sites, then time every chart of each."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(settings.mongo_url)
    db = client[settings.db]
    asyncio.run(_indexes(settings))
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    end_minute = (now.date().toordinal() - EPOCH_ORDINAL) * 1440 + now.hour * 60 + now.minute
    out: dict[str, Any] = {}
    for n in sizes:
        site = f"s{n}.example"
        hits = min(max(20 * n, 100_000), 1_000_000)
        t0 = time.perf_counter()
        counts, props = site_counts(site, n, hits, end_minute, seed=n)
        docs = write_site(db, counts, props, top_bytes)
        print(f"{site}: {hits} hits, {docs} written in {time.perf_counter() - t0:.0f} s", flush=True)
        out[str(n)] = {
            "hits": hits,
            "documents": docs,
            "charts": asyncio.run(
                time_charts(settings.mongo_url or "", settings.db, site, now, requests, sides)
            ),
        }
    client.close()
    return out


async def _indexes(settings: Settings) -> None:
    from pipeline.kinds.hits import layout

    client = mongo_client(settings.mongo_url or "")
    try:
        await ensure_indexes(client[settings.db], layout.indexes("compact"))
    finally:
        await client.close()


# -- ingest, this tree and another -----------------------------------------------------------------


def backlog(events: int, seed: int = 28) -> list[tuple[bytes, bytes | None]]:
    """The issue-28 shape: 50 sites x 200 Zipf pages over 50 minutes ending an hour ago, keyed."""
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1 / (r + 1) ** 1.05 for r in range(200)))
    end = time.time() - 3600
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(events):
        site = f"site{rng.randrange(50)}.example"
        page = f"/p/{bisect.bisect(cum, rng.random() * cum[-1])}"
        ts = round(end - 3000 + 3000 * i / events, 3)
        out.append((orjson.dumps({"site": site, "page": page, "ts": ts}), f"{site}/{page}".encode()))
    return out


def drain(
    base: Settings,
    tag: str,
    lines: Sequence[tuple[bytes, bytes | None]],
    tree: Path | None,
    workers: int = 1,
) -> dict[str, Any]:
    """Workers (of ``tree``, or this one) through ``lines`` from the start: rate, upserts, bytes.

    Failed commits (WriteConflict among them) are counted from the workers' logs.
    """
    from pipeline.kafka.producer import send_lines
    from pipeline.kinds import named
    from pipeline.ops.lag import wait_caught_up
    from pipeline.ops.ledger import ledger_totals, read_ledger
    from pipeline.worker.process import WorkerProcess

    settings = named(base, tag)
    topic = settings.topic("hits")
    asyncio.run(send_lines(settings, topic, lines[:1], 100))  # the workers join on one event first
    procs = [WorkerProcess(settings, f"rollups-{tag}-{i}", tree).start() for i in range(workers)]
    try:
        asyncio.run(wait_caught_up(settings, [topic], timeout=300, poll=0.2))
        began = time.perf_counter()  # from the first send of the backlog to all committed
        asyncio.run(send_lines(settings, topic, lines[1:], 100))
        asyncio.run(wait_caught_up(settings, [topic], timeout=1800, poll=0.2))
        took = time.perf_counter() - began
    finally:
        for w in procs:
            w.terminate()
    logs = "".join(w.log_path.read_text(errors="replace") for w in procs)

    async def stats() -> dict[str, Any]:
        client = mongo_client(settings.mongo_url or "", timeout=120)
        try:
            db = client[settings.db]
            totals = ledger_totals(await read_ledger(db, settings.group_id, [topic]))
            sizes = {}
            for c in ("hits_daily", "hits_monthly", "hits_site_daily", "hits_site_monthly"):
                st = await db.command("collStats", c) if c in await db.list_collection_names() else {}
                sizes[c] = {"count": st.get("count", 0), "size": st.get("size", 0)}
            return {"events": totals.events, "upserts": totals.docs, "collections": sizes}
        finally:
            await client.close()

    got = asyncio.run(stats())
    data = sum(v["size"] for v in got["collections"].values())
    got.update(
        workers=workers,
        failed_commits=logs.count("commit failed"),
        write_conflicts=logs.count("WriteConflict"),
        seconds=round(took, 1),
        events_per_s=round(len(lines) / took),
        upserts_per_event=round(got["upserts"] / max(1, got["events"]), 4),
        stored_bytes_per_event=round(data / max(1, got["events"]), 1),
    )
    print(f"  {tag}: {got}", flush=True)
    return got


def crawl(base: Settings, tag: str, urls: int, pattern: str, tree: Path | None) -> dict[str, Any]:
    """``urls`` hits, each a distinct URL of one site within one day, through one worker."""
    day = time.time() - 86400
    lines = [
        (
            orjson.dumps(
                {"site": "crawl.example", "page": pattern.format(i), "ts": round(day + i * 0.05, 2)}
            ),
            None,
        )
        for i in range(urls)
    ]
    return drain(base, tag, lines, tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000,100000", help="pages per site")
    ap.add_argument("--requests", type=int, default=30, help="timed requests per chart and side")
    ap.add_argument("--skip-reads", action="store_true")
    ap.add_argument(
        "--top-bytes", type=int, default=HitsSettings().top_pages_bytes, help="the top pages' budget written"
    )
    ap.add_argument("--after-only", action="store_true", help="time only the rollups' reads")
    ap.add_argument("--events", type=int, default=300_000, help="the ingest backlog (50 sites x 200 pages)")
    ap.add_argument(
        "--compare-tree", type=Path, help="a worktree before rollups: ingest and crawl side by side"
    )
    ap.add_argument(
        "--crawl", type=int, default=1_000_000, help="distinct URLs of the crawler runs (0: skip)"
    )
    ap.add_argument("--crawl-before", type=int, default=200_000, help="distinct URLs of the old tree's crawl")
    ap.add_argument("--out", default="bench-results/rollups.json")
    args = ap.parse_args()
    results: dict[str, Any] = header(" ".join(sys.argv))
    with embedded("preagg-bench-rollups-") as (base, _):
        if not args.skip_reads:
            sides = ("after",) if args.after_only else ("before", "after")
            sizes = [int(s) for s in args.sizes.split(",")]
            results["top_pages_bytes"] = args.top_bytes
            results["reads"] = reads(base, sizes, args.requests, args.top_bytes, sides)
        if args.events:
            lines = backlog(args.events)
            ingest: dict[str, Any] = {}
            if args.compare_tree:
                ingest["before"] = drain(base, "ingest-before", lines, args.compare_tree.resolve())
            ingest["after"] = drain(base, "ingest-after", lines, None)
            keyless = [(line, None) for line, _ in lines]
            if args.compare_tree:
                ingest["keyless3_before"] = drain(base, "kl-before", keyless, args.compare_tree.resolve(), 3)
            ingest["keyless3_after"] = drain(base, "kl-after", keyless, None, 3)
            results["ingest"] = ingest
        if args.crawl:
            crawls: dict[str, Any] = {}
            crawls["queries_after"] = crawl(base, "crawl-q", args.crawl, "/search?q={}", None)
            crawls["paths_after"] = crawl(base, "crawl-p", args.crawl, "/item/{}", None)
            if args.compare_tree:
                tree = args.compare_tree.resolve()
                crawls["paths_before"] = crawl(base, "crawl-old", args.crawl_before, "/item/{}", tree)
            results["crawl"] = crawls
    print(write_results(results, args.out))


if __name__ == "__main__":
    main()
