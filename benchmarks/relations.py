"""Impressions and Bloom-filter relations benchmark (``make bench-relations``).

1. Impressions: a Zipf stream of (user, item) impressions through one worker with
   packed messages: events/s end to end, BSON bytes per pair document, and the
   store's own collection and index sizes scaled per million pairs.
2. Relations on MovieLens 100k (``u.data``, rating >= 4 is a relation): after one
   worker built both sides' filters, the false-positive rate of each side against
   the exact relation, bytes per user and per item document against an exact
   junction collection in the same store, and the latency of "related items of a
   user" through the filters (server-side ``$bitsAllSet`` scan) against the
   junction collection with an index on ``u``.

    python -m benchmarks.relations --out bench-results/relations.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
import orjson
from pymongo import ASCENDING, InsertOne, MongoClient

from benchmarks.common import (
    add_data_option,
    coll_stats,
    data_file,
    embedded,
    latency_ms,
    step,
    timed_worker_run,
    use_data,
    write_results,
)
from pipeline.core.bloom import contains
from pipeline.core.ids import id_bytes
from pipeline.files import Accepted
from pipeline.kinds.impressions import KIND as IMPRESSIONS
from pipeline.kinds.relations import KIND as RELATIONS
from pipeline.kinds.relations.files import read_movielens
from pipeline.kinds.relations.layout import relation_sides
from pipeline.kinds.relations.query import related_items
from pipeline.settings import Settings
from pipeline.store.client import mongo_client


def movielens() -> Path:
    """The data set this benchmark replays (``--data``)."""
    return data_file("ml-100k/u.data")


def impressions(base: Settings, n: int) -> dict[str, Any]:
    """Throughput and sizes of impression counting."""
    settings = base.with_(group_id="bench-imp", db="bench_imp").with_stream(IMPRESSIONS, topic="bench-imp")
    rng = random.Random(1)
    now = time.time()
    items = [rng.paretovariate(1.2) for _ in range(2_000)]
    events = []
    for _ in range(n):
        user, item = rng.randrange(20_000), rng.choices(range(2_000), items)[0]
        events.append(
            (orjson.dumps({"user": user, "item": item, "ts": now - rng.random() * 3600}), id_bytes(user))
        )
    took = timed_worker_run(settings, settings.topic("impressions"), events, "bench-imp")
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    db = client[settings.db]
    sample = list(db.imp_pairs.aggregate([{"$sample": {"size": 1000}}]))
    pairs = db.imp_pairs.count_documents({})
    stats = coll_stats(db, "imp_pairs")
    client.close()
    per_million = {}
    if "size" in stats and pairs:
        per_million = {
            k: round(stats[k] * 1_000_000 / pairs / 2**20, 1)
            for k in ("size", "storageSize", "totalIndexSize")
            if stats.get(k) is not None
        }
    return {
        "events": n - 1,
        "seconds": round(took, 2),
        "events_per_s": round((n - 1) / took),
        "pairs": pairs,
        "bson_bytes_per_pair_mean": round(statistics.mean(len(bson.encode(d)) for d in sample), 1),
        "bson_bytes_per_pair_max": max(len(bson.encode(d)) for d in sample),
        "collection_stats": stats,
        "mib_per_million_pairs": per_million,
    }


def relations(base: Settings, queries: int) -> dict[str, Any] | None:
    """False-positive rates, sizes and query latency on MovieLens 100k."""
    if not movielens().exists():
        return None
    settings = base.with_(group_id="bench-rel", db="bench_rel")
    settings = settings.with_stream(RELATIONS, topic="bench-rel")
    recs = [r for r in read_movielens([str(movielens())]) if isinstance(r, Accepted)]
    pairs = {(e["user"], e["item"]) for e in (orjson.loads(r.raw) for r in recs)}
    took = timed_worker_run(
        settings, settings.topic("relations"), [(r.raw, r.key) for r in recs], "bench-rel"
    )
    s = settings
    rs = s.of(RELATIONS)
    sides = relation_sides(rs.user_capacity, rs.item_capacity, rs.fpr, s.schema)
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    db = client[settings.db]
    users = {d["_id"]: d for d in db.rel_users.find()}
    # An item's filter is kept per source partition; OR of filters of one size is the filter of the union.
    items: dict[Any, dict[str, Any]] = {}
    for d in db.rel_items.find():
        merged = items.setdefault(d["i"], {"b": {}})["b"]
        for w, m in d.get("b", {}).items():
            merged[w] = merged.get(w, 0) | m
    by_user: dict[int, set[int]] = defaultdict(set)
    by_item: dict[int, set[int]] = defaultdict(set)
    for u, i in pairs:
        by_user[u].add(i)
        by_item[i].add(u)
    result: dict[str, Any] = {"relations": len(pairs), "ingest_seconds": round(took, 2)}
    for side, docs, truth, others, spec in (
        ("user", users, by_user, sorted(by_item), sides.user_spec),
        ("item", items, by_item, sorted(by_user), sides.item_spec),
    ):
        rates, fp_total, probes = [], 0, 0
        for key, doc in docs.items():
            words = doc.get("b", {})
            negatives = [x for x in others if x not in truth[key]]
            fp = sum(contains(words, spec, x) for x in negatives)
            fp_total += fp
            probes += len(negatives)
            rates.append(fp / len(negatives))
            assert all(contains(words, spec, x) for x in truth[key]), "false negative"
        result[f"{side}_side"] = {
            "filters": len(docs),
            "capacity": spec.n,
            "bits": spec.m,
            "k": spec.k,
            "fpr_overall": round(fp_total / probes, 5),
            "fpr_mean_per_filter": round(statistics.mean(rates), 5),
            "fpr_max_per_filter": round(max(rates), 5),
            "filters_above_target": sum(r > settings.of(RELATIONS).fpr for r in rates),
            "bson_bytes_per_doc_mean": round(statistics.mean(len(bson.encode(d)) for d in docs.values()), 1),
        }
    # exact junction collection in the same store, indexed both ways
    db.rel_junction.drop()
    db.rel_junction.bulk_write([InsertOne({"u": u, "i": i}) for u, i in sorted(pairs)], ordered=False)
    db.rel_junction.create_index([("u", ASCENDING), ("i", ASCENDING)])
    db.rel_junction.create_index([("i", ASCENDING)])
    sample = list(db.rel_junction.find().limit(1000))
    per_row = statistics.mean(len(bson.encode(d)) for d in sample)
    result["junction"] = {
        "rows": len(pairs),
        "bson_bytes_per_row_mean": round(per_row, 1),
        "bson_bytes_per_user_mean": round(per_row * len(pairs) / len(by_user), 1),
        "bson_bytes_per_item_mean": round(per_row * len(pairs) / len(by_item), 1),
        "collection_stats": coll_stats(db, "rel_junction"),
    }
    result["filters_stats"] = {
        "rel_users": coll_stats(db, "rel_users"),
        "rel_items": coll_stats(db, "rel_items"),
    }
    client.close()
    result["query_related_items_of_user"] = asyncio.run(_latencies(settings, sorted(by_user), sides, queries))
    return result


async def _latencies(settings: Settings, users: list[int], sides: Any, n: int) -> dict[str, Any]:
    client = mongo_client(settings.mongo_url or "")
    db = client[settings.db]
    rng = random.Random(2)
    chosen = [rng.choice(users) for _ in range(n)]
    out: dict[str, Any] = {}
    try:
        for name in ("bloom_filters", "indexed_junction", "bloom_filters", "indexed_junction"):
            times = []
            for u in chosen:
                t = time.perf_counter()
                if name == "bloom_filters":
                    await related_items(db, u, sides)
                else:
                    [d["i"] async for d in db.rel_junction.find({"u": u}, {"i": 1, "_id": 0})]
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            out[name] = {  # the second (warm) pass of each overwrites the first
                **latency_ms(times),
            }
    finally:
        await client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impressions", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default="bench-results/relations.json")
    add_data_option(ap)
    args = ap.parse_args()
    use_data(args.data)
    results: dict[str, Any] = {"when": datetime.now(UTC).isoformat(timespec="seconds")}
    with embedded("preagg-rel-") as (base, _):
        step(results, "impressions", "impressions", lambda: impressions(base, args.impressions))
        step(results, "relations", "relations (MovieLens 100k)", lambda: relations(base, args.queries))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
