"""What one document update costs the store, by document size and by statement shape.

Why: a live flush writes each touched document once, so the store's rate of document
updates bounds freshness at many live pages. This measures that rate on
warm daily-hit-shaped documents (a few hours, N minute counters, the marks), updated
the way a live flush updates them (three ``$inc`` and a mark, the mark in the filter):

* ``per_doc``: one ``UpdateOne`` upsert per document, unordered bulk writes of 2,000
  (what :class:`pipeline.store.sink.MongoSink` sends);
* ``grouped``: one ``update_many`` per 100 documents sharing the same update (what a
  sink could send when many documents get the same increments), without upsert.

Each on the store with its oplog and without (the embedded default:
:mod:`pipeline.services.secantus`).

``--first-touch`` instead measures what a new document costs: a marked upsert that inserts
it, the insert the sink sends for a document found absent, and the read by ``_id`` before it.

Usage: ``python -m benchmarks.store_updates [--docs 6000] [--minutes 0 205 1440] [--oplog both]``
or ``python -m benchmarks.store_updates --first-touch``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from typing import Any

from pymongo import AsyncMongoClient, InsertOne, UpdateOne

from benchmarks.common import embedded, header, write_results
from pipeline.core.marks import marked
from pipeline.core.updates import DocUpdate
from pipeline.services.secantus import KEEP_OPLOG
from pipeline.store.reads import READ_CHUNK
from pipeline.store.statements import update_document
from pipeline.store.upsert_insert import created_by_upsert

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


def first_touch_update(i: int, rnd: random.Random) -> DocUpdate:
    """A keyless page-day document's first flush: metadata on insert, 2-12 minute counters, its
    hours and total, the written stamp, four source partitions (four marks)."""
    cells: dict[str, int] = {}
    for _ in range(rnd.randint(2, 12)):
        key = f"i.{rnd.randint(12, 13)}.{rnd.randint(0, 59)}"
        cells[key] = cells.get(key, 0) + 1
    return DocUpdate(
        "first_touch",
        f"20261126/{i}",
        {"m": {"s": f"site{i % 25}", "p": f"/page/{i}", "d": "2026-11-26"}},
        {"t": sum(cells.values()), "h.12": 3, "h.13": 2, **cells},
        max={"w": 20261126},
        sources=tuple(("hits", p) for p in range(4)),
    )


async def first_touch(url: str, docs: int, reps: int) -> dict[str, Any]:
    """µs a new document costs the store: the marked upsert that inserts it, the insert the sink
    sends instead (:func:`pipeline.store.upsert_insert.created_by_upsert`), and that insert after
    the read by ``_id`` that finds it absent; then reads by ``_id`` of present and absent ids by
    chunk size (the store's ``$in`` is quadratic in the documents it finds). Alternating."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    coll = client["bench_store_updates"]["first_touch"]
    await coll.drop()
    await coll.create_index([("m.s", 1), ("m.p", 1), ("m.d", 1)])
    rnd = random.Random(1)
    seqs = {("hits", p): 7 for p in range(4)}
    out: dict[str, list[float]] = {"upsert": [], "insert": [], "read_then_insert": []}
    n = 0
    for _ in range(reps):
        for kind in out:
            updates = [first_touch_update(i, rnd) for i in range(n, n + docs)]
            n += docs
            ops: list[Any] = []
            for u in updates:
                flt, update = marked(u, update_document(u), seqs)
                doc = created_by_upsert(flt, update)
                ops.append(UpdateOne(flt, update, upsert=True) if kind == "upsert" else InsertOne(doc))
            t = time.perf_counter()
            if kind == "read_then_insert":
                ids = [u.id for u in updates]
                for k in range(0, docs, READ_CHUNK):
                    _ = [d async for d in coll.find({"_id": {"$in": ids[k : k + READ_CHUNK]}}, {"_id": 1})]
            for k in range(0, docs, 2000):
                await coll.bulk_write(ops[k : k + 2000], ordered=False)
            out[kind].append(1e6 * (time.perf_counter() - t) / docs)
    reads: dict[str, float] = {}
    stored = [f"20261126/{i}" for i in range(docs)]  # the first round's documents
    for label, wanted in (("present", stored), ("absent", [i + "x" for i in stored])):
        for chunk in (READ_CHUNK, 500):
            t = time.perf_counter()
            for k in range(0, docs, chunk):
                _ = [d async for d in coll.find({"_id": {"$in": wanted[k : k + chunk]}}, {"_id": 1})]
            reads[f"{label}_chunk_{chunk}_us_per_id"] = round(1e6 * (time.perf_counter() - t) / docs)
    await coll.drop()
    await client.close()
    return {"docs": docs, **{f"{k}_us_per_doc": [round(v) for v in vs] for k, vs in out.items()}, **reads}


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
    ap.add_argument(
        "--first-touch",
        action="store_true",
        help="instead: what a new document costs, upserted or inserted (the embedded default store)",
    )
    args = ap.parse_args()
    results: dict[str, Any] = header(" ".join(sys.argv))
    if args.first_touch:
        with embedded("preagg-store-updates-") as (base, _svc):
            results["first_touch"] = asyncio.run(first_touch(str(base.mongo_url), args.docs, 3))
        print(results["first_touch"], flush=True)
        write_results(results, args.out)
        return
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
