"""Listens benchmark (``make bench-listens``): sketch accuracy and size, "heard" false positives,
ingest through one worker, and top-tags latency.

1. Synthetic streams of known cardinality (10 to 1,000,000 distinct songs): mean and
   max relative error of the estimate per cardinality, at the default precision.
2. Bytes of one sketch at 1, 10, 100, 10,000 distinct songs next to datasketch's
   dense registers and postgresql-hll's published sizes.
3. "Heard": a (user, tag) document's bytes and false positives at 10 to 100,000 songs
   (exact hashes, then growing filters: pipeline/kinds/listens/heard.py).
4. Last.fm 2k (``user_taggedartists.dat``) through one worker: listens/s, then per
   (user, tag) the whole sketch's estimate against the exact distinct artists,
   document bytes, heard misses and false positives on held-out artists, and
   ``top-tags`` latency for users with about 10 and about 100 tags.

    python -m benchmarks.listens --out bench-results/listens.json
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
from datasketch import HyperLogLog
from pymongo import MongoClient

from benchmarks.common import add_data_option, data_file, embedded, latency_ms, step, use_data, write_results
from pipeline.core.hll import Sketch, decode
from pipeline.files import Accepted, Refused
from pipeline.kafka.producer import send_lines
from pipeline.kinds import named
from pipeline.kinds.listens import KIND as LISTENS
from pipeline.kinds.listens.aggregate import ListenSketches
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.files import read_lastfm
from pipeline.kinds.listens.heard import HeardSpec
from pipeline.kinds.listens.layout import listen_fields, listen_id
from pipeline.kinds.listens.query import heard_in, top_tags
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.stored import after_set
from pipeline.worker.process import WorkerProcess


def lastfm_file() -> Path:
    """The data set this benchmark replays (``--data``)."""
    return data_file("lastfm-2k/user_taggedartists.dat")


PG_HLL_BYTES = {1: 11, 10: 83, "full": 1283}


def accuracy(trials: dict[int, int], seed: int = 1) -> dict[str, Any]:
    """Relative error of the estimate for streams of known cardinality."""
    rng = random.Random(seed)
    out = {}
    for n, reps in trials.items():
        errors = []
        for _ in range(reps):
            base = rng.randrange(1 << 40)
            s = Sketch.empty()
            for x in range(base, base + n):
                s.add(x)
            errors.append(abs(s.estimate() - n) / n)
        out[str(n)] = {
            "trials": reps,
            "mean_rel_error": round(statistics.mean(errors), 5),
            "max_rel_error": round(max(errors), 5),
        }
    return out


def sizes() -> dict[str, Any]:
    """Encoded bytes per sketch against dense datasketch registers and postgresql-hll."""
    out: dict[str, Any] = {}
    for n in (1, 10, 100, 10_000):
        s = Sketch.empty()
        for x in range(n):
            s.add(x)
        out[str(n)] = {
            "ours": len(s.encode()),
            "datasketch_dense": HyperLogLog(p=12).bytesize(),
            "postgresql_hll": PG_HLL_BYTES.get(n, PG_HLL_BYTES["full"] if n >= 10_000 else None),
        }
    return out


def lastfm(base: Settings, queries: int) -> dict[str, Any] | None:
    """The real data set through one worker, then accuracy, false positives and latency."""
    if not lastfm_file().exists():
        return None
    settings = named(base, "bench-listens")
    records = list(read_lastfm([str(lastfm_file())]))
    events = [(r.raw, r.key) for r in records if isinstance(r, Accepted)]
    refused = [r for r in records if isinstance(r, Refused)]
    events += synthetic_users()
    exact: dict[tuple[Any, Any], set[Any]] = defaultdict(set)
    for raw, _ in events:
        e = orjson.loads(raw)
        exact[(e["user"], e["tag"])].add(e["song"])
    asyncio.run(send_lines(settings, settings.topic("listens"), events[:1]))
    w = WorkerProcess(settings, "bench-listens").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("listens")], timeout=120, poll=0.2))
        began = time.perf_counter()
        asyncio.run(send_lines(settings, settings.topic("listens"), events[1:]))
        asyncio.run(wait_caught_up(settings, [settings.topic("listens")], timeout=1800, poll=0.2))
        took = time.perf_counter() - began
    finally:
        w.terminate()
    f = listen_fields(settings.schema)
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    stored = {d["_id"]: d for d in client[settings.db][f["collection"]].find()}
    client.close()
    docs = {key: stored[listen_id(*key)] for key in exact}
    real = {k: v for k, v in exact.items() if not str(k[0]).startswith("synthetic")}
    spec = settings.of(LISTENS).heard()
    judged = judge(docs, real, f, spec)  # Last.fm's pairs (<= 220 B)
    synthetic = judge(docs, {k: v for k, v in exact.items() if k not in real}, f, spec)
    tags_per_user: dict[Any, int] = defaultdict(int)
    for user, _ in exact:
        if str(user).startswith("synthetic"):
            tags_per_user[user] += 1
    return {
        "rows": len(records),
        "refused_rows": len(refused),
        "refused_examples": [f"line {r.line_no}: {r.detail}" for r in refused[:3]],
        "listens": len(events),
        "of_which_synthetic": len(synthetic_users()),
        "user_tag_pairs": len(exact),
        "ingest_seconds": round(took, 1),
        "listens_per_s": round((len(events) - 1) / took),
        **judged,
        "synthetic_pairs_document_bytes_mean": synthetic["document_bytes_mean"],
        "top_tags_latency": asyncio.run(_latency(settings, tags_per_user, queries)),
    }


def judge(
    docs: dict[tuple[Any, Any], dict[str, Any]],
    exact: dict[tuple[Any, Any], set[Any]],
    f: dict[str, str],
    spec: HeardSpec,
    seed: int = 3,
) -> dict[str, Any]:
    """Stored documents against the truth: estimate error by size, bytes, heard misses and false positives.

    ``docs`` as PyMongo reads them (BinData of subtype 0 as ``bytes``). The Last.fm
    step crashed here once (the stored BinData filter went to the word-based
    check); ``tests/unit/test_bench_listens.py`` runs this on documents the aggregator wrote.
    """
    rng = random.Random(seed)
    bands: dict[str, list[float]] = defaultdict(list)
    doc_bytes, whole_bytes = [], []
    fp = probes = misses = 0
    songs = sorted({s for v in exact.values() for s in v})
    for key, truth in exact.items():
        doc = docs[key]
        doc_bytes.append(len(bson.encode(doc)))
        whole_bytes.append(len(bytes(doc[f["whole"]])))
        n = len(truth)
        band = "1-9" if n < 10 else "10-99" if n < 100 else "100-999" if n < 1000 else "1000+"
        bands[band].append(abs(decode(bytes(doc[f["whole"]])).estimate() - n) / n)
        misses += sum(not heard_in(doc, s, f, spec) for s in truth)
        for s in rng.sample(songs, min(20, len(songs))):
            if s not in truth:
                probes += 1
                fp += heard_in(doc, s, f, spec)
    return {
        "accuracy_by_distinct": {
            b: {
                "pairs": len(v),
                "mean_rel_error": round(statistics.mean(v), 5),
                "max_rel_error": round(max(v), 5),
            }
            for b, v in sorted(bands.items())
        },
        "document_bytes_mean": round(statistics.mean(doc_bytes), 1),
        "whole_sketch_bytes_mean": round(statistics.mean(whole_bytes), 1),
        "documents_with_filters": sum(1 for d in docs.values() if d.get(f["filters"])),
        "heard_false_negatives": misses,
        "heard_fpr": round(fp / max(1, probes), 5),
        "heard_probes": probes,
    }


def stored_doc(songs: int, spec: HeardSpec, window: int = 1000) -> dict[str, Any]:
    """The document of one (user, tag) after ``songs`` distinct songs, ``window`` per flush (no store)."""
    f = listen_fields()
    doc: dict[str, Any] = {"_id": listen_id(1, 2), f["user"]: 1, f["tag"]: 2, f["slots"]: {}}
    for start in range(0, songs, window):
        agg = ListenSketches(ListenDecoder(10**9, 300, clock=lambda: 2e9), 12, spec)
        for song in range(start, min(songs, start + window)):
            agg.ingest(b'{"user": 1, "tag": 2, "song": %d, "ts": 1763596800}' % song)
        upd = agg.plan()[0]  # the (user, tag) document; the user's summary follows
        assert upd.compute is not None
        doc = after_set(doc, upd.compute(doc))
    return doc


def heard_sizes(spec: HeardSpec, probes: int = 50_000) -> dict[str, Any]:
    """Bytes and heard false positives of one (user, tag) at 10 to 100,000 songs."""
    f = listen_fields()
    out: dict[str, Any] = {}
    for n in (10, 100, 1_000, 10_000, 100_000):
        doc = stored_doc(n, spec)
        false = sum(heard_in(doc, s, f, spec) for s in range(10**9, 10**9 + probes))
        out[str(n)] = {
            "document_bytes": len(bson.encode(doc)),
            "whole_sketch_bytes": len(doc[f["whole"]]),
            "filters": len(doc.get(f["filters"]) or ()),
            "filter_bytes": sum(len(b) for b in doc.get(f["filters"]) or ()),
            "heard_fpr": round(false / probes, 5),
            "expected_fpr": round(spec.expected_fpr(n), 5),
            "false_negatives": sum(not heard_in(doc, s, f, spec) for s in range(n)),
        }
    return out


def synthetic_users(per_class: int = 20, songs: int = 30) -> list[tuple[bytes, bytes]]:
    """Users with 10 and with 100 tags, listened to over the last 7 days (for top-tags latency)."""
    rng = random.Random(9)
    now = time.time()
    out = []
    for tags in (10, 100):
        for i in range(per_class):
            user = f"synthetic-{tags}-{i}"
            for tag in range(tags):
                for song in rng.sample(range(10_000), songs):
                    event = {"user": user, "tag": tag, "song": song, "ts": now - rng.random() * 6 * 86400}
                    out.append((orjson.dumps(event), user.encode()))
    return out


async def _latency(settings: Settings, tags_per_user: dict[Any, int], n: int) -> dict[str, Any]:
    client = mongo_client(settings.mongo_url or "")
    db = client[settings.db]
    today = datetime.now(UTC).date()
    out: dict[str, Any] = {}
    try:
        for label, lo, hi in (("10 tags", 10, 10), ("100 tags", 100, 100)):
            users = [u for u, k in tags_per_user.items() if lo <= k <= hi]
            if not users:
                continue
            times = []
            for i in range(n):
                t = time.perf_counter()
                await top_tags(db, users[i % len(users)], 7, today=today, mode=settings.schema)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            out[label] = {
                "users": len(users),
                **latency_ms(times),
            }
    finally:
        await client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default="bench-results/listens.json")
    add_data_option(ap)
    args = ap.parse_args()
    use_data(args.data)
    results: dict[str, Any] = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "precision": 12}
    trials = {10: 50, 100: 50, 1_000: 50, 10_000: 20, 100_000: 5, 1_000_000: 2}
    step(results, "accuracy_synthetic", "accuracy on synthetic streams", lambda: accuracy(trials))
    step(results, "bytes_per_sketch", "bytes per sketch", sizes)
    step(
        results,
        "heard_bytes_and_fpr_by_songs",
        "heard: document bytes and false positives at 10..100,000 songs",
        lambda: heard_sizes(HeardSpec()),
    )
    with embedded("preagg-listens-") as (base, _):
        step(results, "lastfm", "Last.fm 2k through one worker", lambda: lastfm(base, args.queries))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
