"""Steady-state benchmark (``make bench-steady``): live streams whose keys repeat across flushes,
a 30-day backfill, and chunked reads by id against one ``$in``.

1. **Steady state**, one stream kind at a time (hits, hits with custom properties,
   impressions, relations, listens), one worker on the embedded services: a producer
   offers a fixed rate of events stamped "now" (listens: within the last 5 days)
   over a key space that every flush revisits, for ``--minutes`` (3 by default).
   The partition ledgers in MongoDB are sampled every 5 s: committed events per
   minute. The worker's log gives every flush's duration, documents and bytes;
   its ``/metrics`` the failed commits and splits.
2. **Backfill**: 30 days of hits (200+ pages) produced at once, then one worker
   drains them: events/s, largest commit, failed commits, exact counts (audit).
3. **Reads by id** on a 3,000-document collection of the embedded store: one
   ``find({_id: {$in: ids}})`` against chunks of 1,000 ... 10 ids.

    python -m benchmarks.steady --out bench-results/steady.json [--minutes 3] [--only listens]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pymongo import MongoClient

from benchmarks.common import embedded, step, write_results
from pipeline.core.families import family_of
from pipeline.core.times import minute_of
from pipeline.kafka.producer import EventProducer
from pipeline.kinds import named
from pipeline.kinds.hits.aggregate import Key
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.store.offsets import OFFSETS_COLLECTION
from pipeline.testing.audit import audit_database
from pipeline.worker.process import WorkerProcess

Events = list[tuple[bytes, bytes]]
FLUSHED = re.compile(r"flushed (\w+): (\d+) events, .*?, (\d+) docs(?:, (\d+) bytes)? in ([\d.]+)s")


@dataclass(frozen=True)
class Stream:
    """One kind's live traffic: the kind (its topic), offered rate and event generator."""

    kind: str
    rate: int
    make: Callable[[random.Random, int, float, Counter[Key]], Events]


def _zipf(rng: random.Random, n: int, k: int, s: float = 1.1) -> list[int]:
    weights = [1 / (i + 1) ** s for i in range(n)]
    return rng.choices(range(n), weights, k=k)


SITES = [f"site{i}.example" for i in range(5)]
COUNTRIES = ["DE", "US", "FR", "GB", "IN", "BR", "JP", "NL", "ES", "IT"]


def hits(props: bool) -> Callable[[random.Random, int, float, Counter[Key]], Events]:
    """Hits on 5 sites x 200 Zipf pages at the current time (optionally 3 custom properties)."""

    def make(rng: random.Random, n: int, now: float, truth: Counter[Key]) -> Events:
        out = []
        for i, p in enumerate(_zipf(rng, 200, n)):
            # the truth buckets the time the event carries (rounded), as the worker does
            site, page, ts = SITES[i % 5], f"/page/{p}", round(now + rng.random(), 3)
            ev: dict[str, Any] = {"site": site, "page": page, "ts": ts}
            if props:
                ev["props"] = {
                    "country": COUNTRIES[p % 10],
                    "device": ("mobile", "desktop", "tablet")[i % 3],
                    "plan": f"p{rng.randrange(5)}",
                }
            truth[(site, page, minute_of(ts))] += 1
            out.append((orjson.dumps(ev), site.encode()))
        return out

    return make


def pairs(items: int, timed: bool) -> Callable[[random.Random, int, float, Counter[Key]], Events]:
    """5,000 users x ``items`` Zipf items (impressions carry a time, relations need none)."""

    def make(rng: random.Random, n: int, now: float, truth: Counter[Key]) -> Events:
        out = []
        for it in _zipf(rng, items, n):
            u = rng.randrange(5000)
            ev: dict[str, Any] = (
                {"user": u, "item": it, "ts": round(now, 3)} if timed else {"user": u, "item": it}
            )
            out.append((orjson.dumps(ev), str(u).encode()))
        return out

    return make


def listens(users: int = 120, tags: int = 25) -> Callable[[random.Random, int, float, Counter[Key]], Events]:
    """``users`` x ``tags`` (user, tag) documents, 2,000 songs, times within the last 5 days."""

    def make(rng: random.Random, n: int, now: float, truth: Counter[Key]) -> Events:
        out = []
        for _ in range(n):
            u, t = rng.randrange(users), rng.randrange(tags)
            ts = round(now - rng.random() * 5 * 86400)
            ev = {"user": u, "tag": t, "song": rng.randrange(2000), "ts": ts}
            out.append((orjson.dumps(ev), str(u).encode()))
        return out

    return make


STREAMS: dict[str, Stream] = {
    "hits": Stream("hits", 30_000, hits(False)),
    "hits-props": Stream("hits", 15_000, hits(True)),
    "impressions": Stream("impressions", 20_000, pairs(1000, timed=True)),
    "relations": Stream("relations", 15_000, pairs(2000, timed=False)),
    "listens": Stream("listens", 4_000, listens()),
}


class LedgerSampler(threading.Thread):
    """Committed events of a group (sum over its partition ledgers), every ``every`` seconds."""

    def __init__(self, settings: Settings, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url, timeoutMS=20_000)
        self.coll = self.client[settings.db][OFFSETS_COLLECTION]
        self.group = settings.group_id
        self.every = every
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()

    def committed(self) -> int:
        found = self.coll.find({"group": self.group}, {"events": 1, "topic": 1})
        return sum(
            int(d.get("events", 0)) for d in found if family_of(str(d.get("topic"))) is None
        )  # main ledgers

    def run(self) -> None:
        while not self.stopped.is_set():
            self.samples.append((time.monotonic(), self.committed()))
            self.stopped.wait(self.every)

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        self.client.close()


def _wait_assigned(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if orjson.loads(r.read()).get("assigned"):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("worker holds no partition")


def metric(body: str, name: str, stream: str) -> float | None:
    for line in body.splitlines():
        if line.startswith(f'{name}{{stream="{stream}"}}'):
            return float(line.split()[-1])
    return None


def flush_figures(log: str, stream: str) -> dict[str, Any]:
    """Flush durations, documents and bytes per commit, from the worker's log lines."""
    secs, docs, sizes = [], [], []
    for m in FLUSHED.finditer(log):
        if m.group(1) != stream or int(m.group(2)) == 0:
            continue
        docs.append(int(m.group(3)))
        sizes.append(int(m.group(4) or 0))
        secs.append(float(m.group(5)))
    secs.sort()
    if not secs:
        return {"flushes": 0}
    return {
        "flushes": len(secs),
        "flush_s_p50": round(secs[len(secs) // 2], 3),
        "flush_s_p99": round(secs[max(0, int(len(secs) * 0.99) - 1)], 3),
        "flush_s_max": round(secs[-1], 3),
        "flushes_over_5s": sum(1 for s in secs if s > 5.0),
        "docs_per_commit_mean": round(statistics.mean(docs), 1),
        "docs_per_commit_max": max(docs),
        "bytes_per_commit_max": max(sizes),
        "commit_failures_logged": log.count("MongoDB commit failed") + log.count("failed as too large"),
    }


async def _offer(
    settings: Settings,
    topic: str,
    stream: Stream,
    seconds: float,
    truth: Counter[Key],
    pack: int = 100,
    keyless: bool = False,
) -> int:
    """Send ``stream.rate`` events per second for ``seconds``, ``pack`` per message; returns events sent."""
    rng = random.Random(7)
    sent = 0
    began = time.monotonic()
    async with EventProducer(settings, topic, pack) as p:
        tick = 0
        while time.monotonic() - began < seconds:
            n = int(stream.rate * (tick + 1) * 0.5) - sent  # half-second ticks, catching up if late
            for line, key in stream.make(rng, n, time.time(), truth):
                await p.send_raw(line, None if keyless else key)
            sent += n
            await p.flush()
            tick += 1
            await asyncio.sleep(max(0.0, began + tick * 0.5 - time.monotonic()))
    return sent


def per_minute(samples: list[tuple[float, int]], began: float, minutes: int) -> list[float]:
    """Events/s committed in each whole minute after ``began``, from the ledger samples."""

    def at(t: float) -> int:
        best = min(samples, key=lambda s: abs(s[0] - t))
        return best[1]

    return [round((at(began + 60 * (i + 1)) - at(began + 60 * i)) / 60, 1) for i in range(minutes)]


def steady(
    base: Settings,
    kind: str,
    minutes: int,
    drain_limit: float = 120,
    workers: int = 1,
    pack: int = 100,
    keyless: bool = False,
    tree: Path | None = None,
) -> dict[str, Any]:
    """One kind's live stream through ``workers`` workers for ``minutes``: throughput per minute, flushes.

    ``tree``: run the workers from another checkout (an older commit), for a comparison.
    """
    stream = STREAMS[kind]
    settings = named(base, f"steady-{kind}" + ("-tree" if tree else ""))
    topic = settings.topic(stream.kind)
    ports = [free_port() for _ in range(workers)]
    procs = [
        WorkerProcess(
            settings.with_(web_port=port), f"steady-{kind}-{i}" + ("-tree" if tree else ""), tree
        ).start()
        for i, port in enumerate(ports)
    ]
    sampler = LedgerSampler(settings)
    truth: Counter[Key] = Counter()
    try:
        for port in ports:
            _wait_assigned(port)
        sampler.start()
        began = time.monotonic()
        sent = asyncio.run(_offer(settings, topic, stream, 60 * minutes, truth, pack, keyless))
        offered_s = time.monotonic() - began
        try:
            asyncio.run(wait_caught_up(settings, [topic], timeout=drain_limit, poll=0.5))
            drained_s: float | None = time.monotonic() - began
        except TimeoutError:
            drained_s = None  # the worker is slower than the offered rate: the backlog is reported
        bodies = []
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                bodies.append(r.read().decode())
    finally:
        sampler.stop()
        for w in procs:
            w.terminate()
    name = "hits" if kind.startswith("hits") else kind
    out: dict[str, Any] = {
        "offered_events_per_s": stream.rate,
        "sent": sent,
        "committed_at_end": sampler.samples[-1][1] if sampler.samples else 0,
        "produce_seconds": round(offered_s, 1),
        "all_committed_after_s": round(drained_s, 1) if drained_s is not None else None,
        "committed_per_s_by_minute": per_minute(sampler.samples, began, minutes),
        "workers": workers,
        "pack": pack,
        "keyless": keyless,
        "failed_commits": sum(metric(b, "preagg_commit_failures_total", name) or 0 for b in bodies),
        "splits": sum(metric(b, "preagg_commit_splits_total", name) or 0 for b in bodies),
        "docs_limit_at_end": min(metric(b, "preagg_commit_docs_limit", name) or 0 for b in bodies),
        "write_conflicts_logged": sum(w.log_path.read_text().count("WriteConflict") for w in procs),
        **flush_figures("\n".join(w.log_path.read_text() for w in procs), name),
    }
    by_min = out["committed_per_s_by_minute"]
    out["third_vs_first_minute"] = round(by_min[-1] / by_min[0], 3) if by_min and by_min[0] else None
    if kind == "hits":
        out["audit_mismatches"] = _audit(settings, truth)
    return out


def _audit(settings: Settings, truth: Counter[Key]) -> int:
    problems = asyncio.run(audit_database(settings, truth))
    for p in problems[:5]:
        print("  audit:", p)
    return len(problems)


def backfill(base: Settings, events: int = 1_200_000, days: int = 30, pages: int = 250) -> dict[str, Any]:
    """``events`` hits, ``days`` days, ``pages`` x 2 sites, in time order: produced first, then drained."""
    settings = named(base, "backfill")
    rng = random.Random(3)
    end = time.time() - 86400
    truth: Counter[Key] = Counter()
    began = time.monotonic()

    async def produce() -> None:
        async with EventProducer(settings, settings.topic("hits"), 100) as p:
            start = end - days * 86400
            for i in range(events):
                # a log replayed in time order (up to a minute out of order), as a backfill is
                site, page = ("a.example", "b.example")[i % 2], f"/p/{rng.randrange(pages)}"
                ts = round(start + days * 86400 * i / events - rng.random() * 60, 3)
                truth[(site, page, minute_of(ts))] += 1
                await p.send_raw(orjson.dumps({"site": site, "page": page, "ts": ts}), site.encode())

    asyncio.run(produce())
    produce_s = time.monotonic() - began
    port = free_port()
    worker = WorkerProcess(settings.with_(web_port=port), "backfill").start()
    try:
        _wait_assigned(port)
        started = time.monotonic()
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=1800, poll=0.5))
        took = time.monotonic() - started
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
    finally:
        worker.terminate()
    return {
        "events": events,
        "days": days,
        "pages": pages * 2,
        "produce_seconds": round(produce_s, 1),
        "drain_seconds": round(took, 1),
        "events_per_s": round(events / took),
        "failed_commits": metric(metrics, "preagg_commit_failures_total", "hits"),
        "splits": metric(metrics, "preagg_commit_splits_total", "hits"),
        "sealed_at_bound": metric(metrics, "preagg_batches_sealed_total", "hits"),
        **flush_figures(worker.log_path.read_text(), "hits"),
        "audit_mismatches": _audit(settings, truth),
    }


def read_chunks(base: Settings, n: int = 3000) -> dict[str, Any]:
    """Seconds to read ``n`` documents by id: one ``$in``, chunks of 1,000 ... 10, a full scan."""
    client: MongoClient[dict[str, Any]] = MongoClient(base.mongo_url)
    coll = client["bench_chunks"]["docs"]
    coll.drop()
    coll.insert_many([{"_id": f"i{i}|i{i % 25}", "u": i, "t": i % 25, "a": b"x" * 200} for i in range(n)])
    ids = [f"i{i}|i{i % 25}" for i in range(n)]
    rng = random.Random(1)
    rng.shuffle(ids)
    out: dict[str, Any] = {"documents": n}
    for chunk in (n, 1000, 500, 200, 100, 50, 20, 10):
        began = time.perf_counter()
        got = 0
        for i in range(0, n, chunk):
            got += len(list(coll.find({"_id": {"$in": ids[i : i + chunk]}})))
        assert got == n
        out[f"chunk_{chunk}_s"] = round(time.perf_counter() - began, 3)
    began = time.perf_counter()
    assert len(list(coll.find())) == n
    out["full_scan_s"] = round(time.perf_counter() - began, 3)
    client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-results/steady.json")
    ap.add_argument("--minutes", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="worker replicas per live stream (one group)")
    ap.add_argument("--only", nargs="*", help="steady kinds and/or 'backfill', 'reads'")
    ap.add_argument("--set", nargs="*", default=[], help="settings for the workers: NAME=VALUE")
    ap.add_argument(
        "--compare-tree",
        type=Path,
        help="another checkout (git worktree of an older commit): each live stream runs first "
        "with its workers, then with this tree's, on the same services",
    )
    ap.add_argument("--rate", type=int, help="events/s offered by each live stream (default: the kind's)")
    ap.add_argument("--pack", type=int, default=100, help="events per message of the live streams")
    ap.add_argument("--keyless", action="store_true", help="live streams without keys (round robin)")
    ap.add_argument("--listens-users", type=int, default=120, help="users x 25 tags = listens documents")
    args = ap.parse_args()
    STREAMS["listens"] = Stream("listens", STREAMS["listens"].rate, listens(args.listens_users))
    if args.rate:
        for name, st in list(STREAMS.items()):
            STREAMS[name] = Stream(st.kind, args.rate, st.make)
    overrides = dict(kv.split("=", 1) for kv in args.set)
    only = set(args.only or [*STREAMS, "backfill", "reads"])
    results: dict[str, Any] = {
        "minutes": args.minutes,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "settings": overrides,
        "listens_documents": args.listens_users * 25,
    }
    with embedded("preagg-steady-") as (base, _svc):
        base = Settings.from_env(
            {**base.to_env(), **{f"PREAGG_{k.upper()}": v for k, v in overrides.items()}}
        )
        if "reads" in only:
            step(results, "reads_by_id", "reads by id: one $in against chunks", lambda: read_chunks(base))
        for kind in STREAMS:
            if kind not in only:
                continue
            if args.compare_tree:
                tree = args.compare_tree.resolve()
                step(
                    results,
                    f"steady_{kind}_tree",
                    f"steady state: {kind}, {args.minutes} min, workers of {tree}",
                    lambda k=kind, t=tree: steady(  # type: ignore[misc]
                        base,
                        k,
                        args.minutes,
                        workers=args.workers,
                        pack=args.pack,
                        keyless=args.keyless,
                        tree=t,
                    ),
                )
            step(
                results,
                f"steady_{kind}",
                f"steady state: {kind}, {args.minutes} min",
                lambda k=kind: steady(  # type: ignore[misc]
                    base, k, args.minutes, workers=args.workers, pack=args.pack, keyless=args.keyless
                ),
            )
        if "backfill" in only:
            step(results, "backfill", "backfill: 30 days of hits", lambda: backfill(base))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
