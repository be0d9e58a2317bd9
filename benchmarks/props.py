"""Compact schema and name store benchmark (``make bench-props``).

On the public Apache access log (``../shared/data/access-logs/apache_logs``: 10k
lines over 4 days, replayed ``--copies`` times, each copy 4 days later), with the
custom properties status, method, referrer host and user-agent family:

1. Space: BSON bytes per daily document and collStats of the hits collections
   (plus the name store), compact schema with name store against readable names,
   with and without properties. Each variant has its own database, fed by its own
   worker, one after the other on the same services.
2. Throughput: events/s through one worker with and without properties, per mode
   (from the first send to all committed, after a warm-up event).
3. Tokenization alone, in process: aggregating the log with and without
   properties (decode + count, no I/O), and the name store's round trips to
   resolve every name and value cold, then again warm.

    python -m benchmarks.props --out bench-results/props.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import bson
import orjson
from pymongo import MongoClient

from benchmarks.common import (
    add_data_option,
    coll_stats,
    data_file,
    embedded,
    step,
    timed_worker_run,
    use_data,
    write_results,
)
from pipeline.files import Accepted
from pipeline.kinds import named
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.files import read_hits
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.props import PropKeys, namespace_limit
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.meta import ensure_indexes
from pipeline.store.names import NameCache, NameStore
from pipeline.store.names.store import names_fields, names_indexes


def access_log() -> Path:
    """The data set this benchmark replays (``--data``)."""
    return data_file("access-logs/apache_logs")


SITE = "semicomplete.com"
SHIFT = 4 * 86_400.0


def log_events(copies: int, props: bool) -> list[tuple[bytes, bytes | None]]:
    """The access log as hit events (``copies`` times, shifted by 4 days each)."""
    dec = HitDecoder(16_384, 300.0)
    base = [r for r in read_hits([str(access_log())], "clf", dec, SITE, props) if isinstance(r, Accepted)]
    out: list[tuple[bytes, bytes | None]] = []
    for c in range(copies):
        for r in base:
            if c == 0:
                out.append((r.raw, r.key))
                continue
            e = orjson.loads(r.raw)
            e["ts"] += c * SHIFT
            out.append((orjson.dumps(e), r.key))
    return out


def doc_sizes(settings: Settings) -> dict[str, Any]:
    """BSON bytes of the daily documents, and collStats of the collections this variant wrote."""
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    try:
        db = client[settings.db]
        f = hits_fields(settings.schema)
        sizes = [len(bson.encode(d)) for d in db[f.daily.collection].find()]
        names = names_fields(settings.schema)["collection"]
        return {
            "daily_docs": len(sizes),
            "daily_bson_bytes_mean": round(statistics.fmean(sizes), 1),
            "daily_bson_bytes_median": statistics.median(sizes),
            "daily_bson_bytes_total": sum(sizes),
            "hits_daily": coll_stats(db, f.daily.collection),
            "hits_monthly": coll_stats(db, f.monthly.collection),
            "name_store": coll_stats(db, names),
        }
    finally:
        client.close()


def variant(
    base: Settings, mode: str, props: bool, events: list[tuple[bytes, bytes | None]]
) -> dict[str, Any]:
    """One worker over the events in one schema mode: throughput, then document sizes."""
    tag = f"{mode}-{'props' if props else 'plain'}"
    settings = named(base, f"bprops-{tag}").with_(schema=mode)
    took = timed_worker_run(settings, settings.topic("hits"), events, f"bench-{tag}")
    return {
        "mode": mode,
        "props": props,
        "events": len(events) - 1,
        "seconds": round(took, 2),
        "events_per_s": round((len(events) - 1) / took),
        **doc_sizes(settings),
    }


def aggregate_only(copies: int, rounds: int = 3) -> dict[str, Any]:
    """Decode and count the log in process, with and without properties (best of ``rounds``)."""
    out: dict[str, Any] = {}
    for props in (False, True):
        raws = [raw for raw, _ in log_events(copies, props)]
        best = float("inf")
        for _ in range(rounds):
            agg = HitCounts(HitDecoder(16_384, 1e12), hits_fields())
            t = time.perf_counter()
            for raw in raws:
                agg.ingest(raw)
            best = min(best, time.perf_counter() - t)
        out["with_props" if props else "without_props"] = {
            "events": len(raws),
            "events_per_s": round(len(raws) / best),
            "distinct_pairs": len({pair for pairs in agg.props.values() for pair in pairs}),
        }
    out["ratio"] = round(out["with_props"]["events_per_s"] / out["without_props"]["events_per_s"], 3)
    return out


def resolve_cost(base: Settings, copies: int) -> dict[str, Any]:
    """Round trips and time to resolve every property of the log: cold, then warm (cached)."""
    settings = named(base, "bprops-resolve")
    agg = HitCounts(HitDecoder(16_384, 1e12), hits_fields())
    for raw, _ in log_events(copies, True):
        agg.ingest(raw)
    pairs = agg.prop_pairs()

    async def run() -> dict[str, Any]:
        client = mongo_client(settings.mongo_url or "")
        try:
            out: dict[str, Any] = {}
            for phase in ("cold", "warm"):
                if phase == "cold":
                    store = NameStore(client[settings.db])
                    await ensure_indexes(client[settings.db], names_indexes("compact"))
                    keys = PropKeys(NameCache(store, namespace_limit(1000, 10_000), 1000), "compact")
                r0, w0 = store.reads, store.writes
                t = time.perf_counter()
                await keys.resolve(pairs)
                out[phase] = {
                    "ms": round((time.perf_counter() - t) * 1000, 1),
                    "reads": store.reads - r0,
                    "writes": store.writes - w0,
                }
            out["names"] = sum(len({n for n, _ in p}) for p in pairs.values())
            out["values"] = sum(len(p) for p in pairs.values())
            return out
        finally:
            await client.close()

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=4, help="replays of the 10k-line log (4 days apart)")
    ap.add_argument("--out", default="bench-results/props.json")
    add_data_option(ap)
    args = ap.parse_args()
    use_data(args.data)
    if not access_log().exists():
        raise SystemExit(f"{access_log()} not found: the benchmark needs the shared access-log data")
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "make bench-props",
        "copies": args.copies,
    }
    plain, with_props = log_events(args.copies, False), log_events(args.copies, True)
    step(
        results,
        "aggregate_only",
        "in-process decode + count, with and without props",
        lambda: aggregate_only(args.copies),
    )
    with embedded("preagg-bench-props-") as (base, _):
        step(
            results,
            "resolve",
            "name store: resolve every property cold, then warm",
            lambda: resolve_cost(base, args.copies),
        )
        for mode in ("readable", "compact"):
            for props, events in ((False, plain), (True, with_props)):
                key = f"{mode}_{'props' if props else 'plain'}"
                step(
                    results,
                    key,
                    f"worker, {mode} names, props={props}",
                    partial(variant, base, mode, props, events),
                )
    r = results
    r["summary"] = {
        "daily_bytes_compact_vs_readable_with_props": round(
            r["compact_props"]["daily_bson_bytes_mean"] / r["readable_props"]["daily_bson_bytes_mean"], 3
        ),
        "throughput_props_vs_plain_compact": round(
            r["compact_props"]["events_per_s"] / r["compact_plain"]["events_per_s"], 3
        ),
        "throughput_props_vs_plain_readable": round(
            r["readable_props"]["events_per_s"] / r["readable_plain"]["events_per_s"], 3
        ),
    }
    print(orjson.dumps(r["summary"]).decode())
    write_results(results, args.out)


if __name__ == "__main__":
    main()
