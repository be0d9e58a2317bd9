"""What one document update costs the store, by document size and by statement shape.

Why: a live flush writes each touched document once, so the store's rate of document
updates bounds freshness at many live pages (issue 28). This measures that rate on
warm daily-hit-shaped documents (a few hours, N minute counters, the marks), updated
the way a live flush updates them (three ``$inc`` and a mark, the mark in the filter):

* ``per_doc``: one ``UpdateOne`` upsert per document, unordered bulk writes of 2,000
  (what :class:`pipeline.store.sink.MongoSink` sends);
* ``grouped``: one ``update_many`` per 100 documents sharing the same update (what a
  sink could send when many documents get the same increments), without upsert.

Each on the store with its oplog and without (the embedded default:
:mod:`pipeline.services.secantus`).

Usage: ``python -m benchmarks.store_updates [--docs 6000] [--minutes 0 205 1440] [--oplog both]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from pymongo import AsyncMongoClient, UpdateOne

from benchmarks.common import embedded, header, write_results
from pipeline.services.secantus import KEEP_OPLOG

MARK = "_a.hits|0"


def document(i: int, minutes: int) -> dict[str, Any]:
    """A warm daily document: metadata, total, 24 hours, ``minutes`` minute counters, two marks."""
    step = max(1, 1440 // minutes) if minutes else 0
    return {
        "_id": f"20261124/site{i % 50}/page{i}",
        "md": {"d": "2026-11-24", "s": f"site{i % 50}", "p": f"page{i}"},
        "t": 500,
        "h": {str(h): 20 for h in range(24)},
        "m": {str(m): 1 for m in range(0, 1440, step)} if step else {},
        "_a": {"hits|0": 1, "hits|1": 1},
    }


def inc() -> dict[str, Any]:
    """A live flush's increments of one document: total, one hour, one minute."""
    return {"t": 1, "h.13": 1, "m.785": 1}


async def rates(url: str, docs: int, minutes: int, reps: int) -> dict[str, Any]:
    """Document updates per second, per-document upserts and grouped updates, alternating."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    coll = client["bench_store_updates"][f"m{minutes}"]
    await coll.drop()
    stored = [document(i, minutes) for i in range(docs)]
    await coll.insert_many(stored)
    ids = [d["_id"] for d in stored]
    per_doc: list[float] = []
    grouped: list[float] = []
    seq = 10
    for _ in range(reps):
        seq += 1
        ops = [
            UpdateOne(
                {"_id": i, MARK: {"$not": {"$gte": seq}}},
                {"$inc": inc(), "$set": {MARK: seq}, "$setOnInsert": {"md": {"p": i}}},
                upsert=True,
            )
            for i in ids
        ]
        t = time.perf_counter()
        for k in range(0, docs, 2000):
            await coll.bulk_write(ops[k : k + 2000], ordered=False)
        per_doc.append(docs / (time.perf_counter() - t))
        seq += 1
        t = time.perf_counter()
        for k in range(0, docs, 100):
            await coll.update_many(
                {"_id": {"$in": ids[k : k + 100]}, MARK: {"$not": {"$gte": seq}}},
                {"$inc": inc(), "$set": {MARK: seq}},
            )
        grouped.append(docs / (time.perf_counter() - t))
    sample = await coll.find_one({"_id": ids[0]})
    assert sample is not None and sample["t"] == 500 + 2 * reps, "every update applied once"
    fields = 3 + 24 + len(sample["m"]) + 2
    await coll.drop()
    await client.close()
    return {
        "minute_fields": len(sample["m"]),
        "fields": fields,
        "docs": docs,
        "per_doc_updates_per_s": [round(r) for r in per_doc],
        "grouped_updates_per_s": [round(r) for r in grouped],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=6000)
    ap.add_argument("--minutes", type=int, nargs="*", default=[0, 205, 1440])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument(
        "--oplog",
        choices=("both", "on", "off"),
        default="both",
        help="the store with its oplog, without, or both",
    )
    ap.add_argument("--out", default="bench-results/store-updates.json")
    args = ap.parse_args()
    results: dict[str, Any] = header(" ".join(sys.argv))
    rows = []
    for keep in ("1", "0") if args.oplog == "both" else ("1" if args.oplog == "on" else "0",):
        os.environ[KEEP_OPLOG] = keep  # read by the store's wrapper when embedded() starts it
        with embedded("preagg-store-updates-") as (base, _svc):
            for minutes in args.minutes:
                row = {
                    "oplog": keep == "1",
                    **asyncio.run(rates(str(base.mongo_url), args.docs, minutes, args.reps)),
                }
                print(row, flush=True)
                rows.append(row)
    results["rows"] = rows
    write_results(results, args.out)


if __name__ == "__main__":
    main()
