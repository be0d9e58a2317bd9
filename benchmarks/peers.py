"""``make bench-peers``: preagg and Quix Streams side by side on the same broker, store and bytes.

Per shape of a grid (sites × Zipf pages per site × minutes of event time, partitions,
keyed or keyless: :data:`GRID`, or one shape given by ``--sites --pages --minutes
--partitions --keyless``) one topic of single events and one of the same events packed by
100 (preagg's producer), filled once. Then, alternating, each system in a fresh process with its
own consumer group and database: preagg single-event and packed (defaults), Quix
Streams at-least-once and exactly-once (its idiomatic job: :mod:`benchmarks.quix_job`,
run in a virtual environment of its own, ``--quix-venv``, created on first use).
Clock from process start until the store's totals add up; CPU seconds of the process
and of the broker + store; document upserts; every (site, page, minute) cell audited.
Then one ``kill -9`` run of each: killed once half the events are stored, restarted,
audited.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from pymongo import MongoClient

from benchmarks.common import cpu_seconds, embedded, header, peak_rss_mb, side_venv, write_results
from benchmarks.hits import freshness_of_both
from benchmarks.steady import FLUSHED, flush_figures
from pipeline.core.families import family_of
from pipeline.kafka.admin import partition_for
from pipeline.kafka.options import kafka_client_kwargs
from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.layout import indexes as hits_indexes
from pipeline.ops.lag import group_lag, wait_caught_up
from pipeline.services.embedded import EmbeddedServices, free_port
from pipeline.settings import Settings
from pipeline.store.offsets import OFFSETS_COLLECTION
from pipeline.worker.process import WorkerProcess

REPO = Path(__file__).resolve().parents[1]
#: Quix closes a window when a later timestamp reaches the partition: one tick per
#: partition after the last event (preagg counts them as hits of this site).
TICK_SITE = "__tick__"

Cell = tuple[str, str, int]


@dataclass(frozen=True)
class Shape:
    """Sites × pages per site (Zipf-ranked within a site), over ``minutes`` of event time, on
    ``partitions`` partitions; keyless: no message key (log shippers, plain clients), so the
    events of a page are spread over every partition."""

    sites: int
    pages: int
    minutes: int
    partitions: int = 4
    keyless: bool = False
    #: Events name one of this many visitors (0: none): preagg then keeps unique visitors too,
    #: which Quix's job does not count (it counts the same hits).
    visitors: int = 0


SHAPES = {
    "hot": Shape(3, 200, 10),
    "zipf10k": Shape(50, 200, 50),
    "zipf100k": Shape(500, 200, 50),
    # the long shape: 25 sites x 1,000 pages over 70 minutes (about 21,000 live pages).
    "long": Shape(25, 1000, 70),
    "many-sites": Shape(2000, 10, 60),
    "few-sites": Shape(2, 20_000, 60),
    "long-12p": Shape(25, 1000, 70, partitions=12),
    "long-keyless": Shape(25, 1000, 70, keyless=True),
    # log lines as shippers send them: keyless, each naming one of 20,000 visitors
    "long-keyless-visitors": Shape(25, 1000, 70, keyless=True, visitors=20_000),
}
#: The shapes ``make bench-peers`` runs: long event-time ranges, many sites with few pages
#: and few sites with many pages, 4 and 12 partitions, keyed and keyless, and keyless log
#: lines with visitors.
GRID = [
    "hot",
    "zipf10k",
    "long",
    "many-sites",
    "few-sites",
    "long-12p",
    "long-keyless",
    "long-keyless-visitors",
]


def generate(
    shape: Shape, n: int, end: float, seed: int = 7, visitors: int = 0
) -> tuple[list[tuple[bytes, bytes | None]], Counter[Cell]]:
    """``n`` hit events (keyed by site and page unless keyless) and the truth per (site, page, minute).

    ``visitors``: each event names one of that many people (Zipf-ranked, ``visitor`` field):
    the unique-visitor sketches' cost, with system ``preagg-novisitors`` for the
    same events with the feature off.
    """
    rng = random.Random(seed)
    weights = [1 / (k + 1) for k in range(shape.pages)]
    sites = [f"site{i}.example" for i in range(shape.sites)]
    start = end - shape.minutes * 60
    pages = rng.choices(range(shape.pages), weights=weights, k=n)
    # In time order, as a log is: Quix drops events older than a closed window (grace 0).
    times = sorted(round(rng.uniform(start, end), 3) for _ in range(n))
    lines: list[tuple[bytes, bytes | None]] = []
    truth: Counter[Cell] = Counter()
    for p, ts in zip(pages, times, strict=True):
        site = rng.choice(sites)
        page = f"/p{p}"
        key = None if shape.keyless else hit_key(site, page)
        event: dict[str, Any] = {"site": site, "page": page, "ts": ts}
        if visitors:
            event["visitor"] = f"u{int(visitors ** rng.random()) - 1}"  # log-uniform: a few return often
        lines.append((json.dumps(event).encode(), key))
        truth[(site, page, int(ts // 60))] += 1
    return lines, truth


#: Ticks of a keyless shape: Quix repartitions by page, so every partition of its
#: repartition topic must get one too (the chance that 200 keys miss one of 12 is ~1e-6).
KEYLESS_TICKS = 200


def tick_time(end: float, shape: Shape) -> float:
    """When the ticks are: an hour after the last event, and past the keyless job's grace period
    (``shape.minutes + 5``) after the last window, or that window would never close."""
    return end + max(3600, (shape.minutes + 65) * 60)


def ticks(end: float, shape: Shape) -> list[tuple[bytes, bytes | None]]:
    """Events an hour after the last, keyed to reach every partition: they close Quix's last windows."""
    out: dict[int, tuple[bytes, bytes | None]] = {}
    extra: list[tuple[bytes, bytes | None]] = []
    i = 0
    while len(out) < shape.partitions or len(out) + len(extra) < (KEYLESS_TICKS if shape.keyless else 0):
        key = hit_key(TICK_SITE, f"/{i}")
        p = partition_for(key, shape.partitions)
        line = (json.dumps({"site": TICK_SITE, "page": f"/{i}", "ts": tick_time(end, shape)}).encode(), key)
        if p not in out:
            out[p] = line
        elif shape.keyless:
            extra.append(line)
        i += 1
    return list(out.values()) + extra


async def create_topic(settings: Settings, topic: str, partitions: int) -> None:
    """The input topic with an explicit ``retention.ms``: Quix reads it, and the embedded broker's
    DescribeConfigs reports only the configs a topic was created with."""
    admin = AIOKafkaAdminClient(**kafka_client_kwargs(settings))
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            await admin.create_topics(
                [NewTopic(topic, partitions, 1, topic_configs={"retention.ms": str(7 * 86_400_000)})]
            )
    finally:
        await admin.close()


def stored_total(db: Any) -> int:
    f = hits_fields("compact").monthly
    got = list(db[f.collection].aggregate([{"$group": {"_id": None, "n": {"$sum": f"${f.total}"}}}]))
    return int(got[0]["n"]) if got else 0


def mismatched_cells(db: Any, truth: Counter[Cell]) -> dict[str, int]:
    """Cells whose stored minute count differs from the truth (extra cells included)."""
    f = hits_fields("compact").daily
    stored: Counter[Cell] = Counter()
    for doc in db[f.collection].find({}, {f.metadata: 1, f.minute: 1}):
        meta = doc[f.metadata]
        site, page = meta[f.site], meta[f.page]
        if site == TICK_SITE:
            continue
        midnight = int(meta[f.date].timestamp()) // 60
        for h, mins in (doc.get(f.minute) or {}).items():
            for m, n in mins.items():
                stored[(site, page, midnight + 60 * int(h) + int(m))] += int(n)
    cells = set(truth) | set(stored)
    return {
        "cells": len(truth),
        "mismatched_cells": sum(1 for c in cells if stored.get(c, 0) != truth.get(c, 0)),
        "stored_events": sum(stored.values()),
    }


class Run:
    """One system's process on one topic, with its own group and database."""

    def __init__(
        self,
        system: str,
        settings: Settings,
        topic: str,
        tag: str,
        svc: EmbeddedServices,
        quix: Path | None,
        shape: Shape,
    ) -> None:
        self.system = system
        self.shape = shape
        self.settings = settings.with_(
            db=f"peers_{tag}", group_id=f"peers-{tag}", kinds=("hits",), partitions=shape.partitions
        )
        self.settings = self.settings.with_stream(HITS, topic=topic)
        if system == "preagg-novisitors":
            self.settings = self.settings.with_stream(HITS, visitors=False)
        self.topic = topic
        self.tag = tag
        self.svc = svc
        self.quix = quix
        self.proc: subprocess.Popen[bytes] | None = None
        self.worker: WorkerProcess | None = None
        self.log = self.settings.home / "logs" / f"peers-{tag}.log"
        #: Keyless shapes, Quix: the ticks, sent once the group has read every event. Sent
        #: with the events, a tick read early from one partition would close the windows of
        #: its repartitioned page keys before the events of slower partitions get there.
        self.late_ticks: list[tuple[bytes, bytes | None]] = []

    def start(self) -> None:
        if self.system.startswith("quix"):
            assert self.quix is not None
            # The same indexes preagg's setup creates: both systems maintain them per insert.
            client: MongoClient[dict[str, Any]] = MongoClient(self.settings.mongo_url)
            for ix in hits_indexes("compact"):
                client[self.settings.db][ix.collection].create_index(list(ix.keys), name=ix.name)
            client.close()
            guarantee = "exactly-once" if self.system.endswith("eos") else "at-least-once"
            fields = hits_fields("compact")
            names = {
                side: {
                    k: getattr(getattr(fields, side), k) for k in getattr(fields, side).__dataclass_fields__
                }
                for side in ("daily", "monthly")
            }
            self.log.parent.mkdir(parents=True, exist_ok=True)
            out = self.log.open("ab")
            self.proc = subprocess.Popen(
                [
                    str(self.quix),
                    # As a module from the top level: run as a script, benchmarks/calendar.py
                    # would shadow the standard library's calendar.
                    "-m",
                    "benchmarks.quix_job",
                    "--broker",
                    self.settings.kafka_bootstrap,
                    "--mongo",
                    self.settings.mongo_url or "",
                    "--db",
                    self.settings.db,
                    "--topic",
                    self.topic,
                    "--group",
                    self.settings.group_id,
                    "--guarantee",
                    guarantee,
                    "--fields",
                    json.dumps(names),
                    "--state-dir",
                    str(self.settings.home / "quix-state" / self.tag),
                    *(
                        ["--keyless", "--grace-minutes", str(self.shape.minutes + 5)]
                        if self.shape.keyless
                        else []
                    ),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
            )
        else:
            self.worker = WorkerProcess(self.settings, f"peers-{self.tag}").start()

    @property
    def pid(self) -> int:
        if self.proc is not None:
            return self.proc.pid
        assert self.worker is not None
        return self.worker.pid

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.worker is not None and self.worker.alive()

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        elif self.worker is not None:
            self.worker.terminate()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.worker is not None:
            self.worker.terminate()

    def counted(self, db: Any) -> int:
        """Events written so far, as the system records them once their writes are done: preagg's
        ledgers, Quix's sink's counter. One small read: a scan of the documents, every 0.25 s,
        took 29% of the store's time (py-spy) and slowed the writes it measured."""
        if self.system.startswith("quix"):
            doc = db["peer_stats"].find_one({"_id": "quix"}) or {}
            return int(doc.get("events", 0))
        ledgers = db[OFFSETS_COLLECTION].find({"group": self.settings.group_id}, {"events": 1, "topic": 1})
        # The main ledgers: the site rollups' (``<topic>@sites``) count the same events again, and
        # every cell is audited after.
        return sum(int(d.get("events", 0)) for d in ledgers if family_of(str(d.get("topic"))) is None)

    def writes(self, db: Any) -> dict[str, Any]:
        """Document writes, write calls (Quix: bulk writes; preagg: flushes) and seconds spent in them."""
        if self.system.startswith("quix"):
            doc = db["peer_stats"].find_one({"_id": "quix"}) or {}
            return {
                "upserts": int(doc.get("upserts", 0)),
                "write_calls": int(doc.get("calls", 0)),
                "write_s": round(float(doc.get("write_s", 0.0)), 1),
            }
        assert self.worker is not None
        flushes = [
            float(m.group(5))
            for m in FLUSHED.finditer(self.worker.log_path.read_text())
            if m.group(1) == "hits" and int(m.group(2)) > 0
        ]
        docs = sum(
            int(d.get("docs", 0)) for d in db[OFFSETS_COLLECTION].find({"group": self.settings.group_id})
        )
        return {"upserts": docs, "write_calls": len(flushes), "write_s": round(sum(flushes), 1)}


def services_cpu(svc: EmbeddedServices) -> dict[str, float]:
    """CPU seconds of the broker and of the store, by name."""
    return {name: cpu_seconds(p.pid) for name, p in svc._procs.items() if p.poll() is None}


def measure(run: Run, truth: Counter[Cell], want: int, timeout: float) -> dict[str, Any]:
    """Start ``run``, wait until the store holds ``want`` events, then stop and audit."""
    client: MongoClient[dict[str, Any]] = MongoClient(run.settings.mongo_url)
    db = client[run.settings.db]
    s0 = services_cpu(run.svc)
    began = time.perf_counter()
    run.start()
    cpu = 0.0
    peak: float | None = None
    try:
        deadline = began + timeout
        total = 0
        next_look = 0.0
        while time.perf_counter() < deadline and run.alive():
            if run.late_ticks and time.perf_counter() >= next_look:
                next_look = time.perf_counter() + 1.0
                lags = asyncio.run(group_lag(run.settings, [run.topic]))
                if lags and all(p.committed > 0 and p.lag == 0 for p in lags):
                    asyncio.run(send_lines(run.settings, run.topic, run.late_ticks, 1))
                    run.late_ticks = []
            cpu = cpu_seconds(run.pid)
            total = run.counted(db)
            if total >= want:
                break
            time.sleep(0.25)
        took = time.perf_counter() - began
        peak = peak_rss_mb(run.pid)
        s1 = services_cpu(run.svc)
        services = {name: round(s1[name] - s0.get(name, 0.0), 1) for name in s1}
    finally:
        run.stop()
    audit = mismatched_cells(db, truth)
    events = sum(truth.values())
    out = {
        "system": run.system,
        "seconds": round(took, 2),
        "events_per_s": round(events / took) if total >= want else None,
        "done": total >= want,
        "cpu_s_process": round(cpu, 1),
        "cpu_us_per_event": round(cpu / events * 1e6, 1),
        "peak_rss_mb": peak,
        **{f"cpu_s_{name}": v for name, v in services.items()},
        **run.writes(db),
        **audit,
    }
    # Audited: dropped, so that every run starts on a store of the same size. Kept, a grid's
    # last rows ran on a store holding every earlier run's documents (1.5 million by then).
    client.drop_database(run.settings.db)
    client.close()
    return out


def killed(run: Run, truth: Counter[Cell], want: int, timeout: float) -> dict[str, Any]:
    """Kill -9 once half is stored, restart, wait until the store stops changing, audit."""
    client: MongoClient[dict[str, Any]] = MongoClient(run.settings.mongo_url)
    db = client[run.settings.db]
    run.start()
    try:
        deadline = time.perf_counter() + timeout
        while stored_total(db) < want // 2 and time.perf_counter() < deadline and run.alive():
            time.sleep(0.1)
        run.kill()
        run.start()
        last, still = -1, time.perf_counter()
        while time.perf_counter() < deadline:
            total = stored_total(db)
            if total != last:
                last, still = total, time.perf_counter()
            elif total >= want and time.perf_counter() - still > 15:
                break
            time.sleep(0.5)
    finally:
        run.stop()
    out = {"system": run.system, **mismatched_cells(db, truth), "expected_events": sum(truth.values())}
    client.drop_database(run.settings.db)  # as measure() does
    client.close()
    return out


def live(
    base: Settings, shape: str, rate: int, seconds: float, svc: Any = None, tree: Path | None = None
) -> dict[str, Any]:
    """A live stream over ``shape``'s pages at ``rate`` events/s: how fresh a site chart and a page
    are as a reader sees them (probe hits, each on a site of its own), the document writes live
    traffic needs and makes, the store's CPU, the worker's memory."""
    tag = shape if base.of(HITS).rollups_ahead else f"{shape}-together"
    settings = base.with_(
        db=f"peers_live_{tag}".replace("-", "_"), group_id=f"peers-live-{tag}", kinds=("hits",)
    )
    settings = settings.with_stream(HITS, topic=f"peers-live-{tag}")
    web = free_port()
    n = int(rate * seconds)
    background, truth = generate(SHAPES[shape], n, time.time() - 60, seed=11)
    asyncio.run(send_lines(settings, settings.topic("hits"), background[:1], 1))
    worker = WorkerProcess(settings.with_(web_port=web), f"peers-live-{tag}", tree).start()
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    ledger = client[settings.db][OFFSETS_COLLECTION]
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120, poll=0.2))
        docs0 = sum(int(d.get("docs", 0)) for d in ledger.find({"group": settings.group_id}))
        cpu0 = services_cpu(svc) if svc is not None else {}
        began = time.perf_counter()
        watch = MetricsWatch(web)
        watch.start()
        site_lat, page_lat = asyncio.run(freshness_of_both(settings, rate, seconds, 2, background))
        took = time.perf_counter() - began
        cpu1 = services_cpu(svc) if svc is not None else {}
        docs1 = sum(int(d.get("docs", 0)) for d in ledger.find({"group": settings.group_id}))
        body = watch.stop()
    finally:
        worker.terminate()
        client.close()
    return {
        "shape": shape,
        "live_pages": len({(s, p) for s, p, _ in truth}),
        "rate": rate,
        "seconds": round(took),
        **percentiles("site_freshness", site_lat),
        **percentiles("page_freshness", page_lat),
        "probes": len(site_lat),
        # Fresh every second, each second's touched documents written once: a page's day and
        # month, its site's rollups and top pages (4 a site).
        "upserts_needed_per_s": needed_writes(background, rate),
        "upserts_per_s": round((docs1 - docs0) / took),
        # CPU seconds per second of the broker's and the store's processes (1.0: one core busy).
        **{f"{k}_cpu_share": round((cpu1.get(k, v) - v) / took, 2) for k, v in cpu0.items()},
        "worker_rss_mb": round(metric_of(body, "preagg_worker_rss_bytes") / 1e6) or None,
        "worker_rss_max_mb": round(watch.most["preagg_worker_rss_bytes"] / 1e6),
        # The pages' reader letting go of records at its memory bound (pipeline/worker/letgo.py).
        "records_let_go": round(metric_of(body, "preagg_records_let_go_total")),
        "records_read_again": round(metric_of(body, "preagg_records_read_again_total")),
        "records_behind_max": round(watch.most["preagg_records_behind"]),
        **flush_figures(worker.log_path.read_text(), "hits"),
    }


def metric_of(body: str, name: str) -> float:
    """The sum of a metric's samples (every stream's) in a Prometheus text page."""
    return sum(s.value for f in text_string_to_metric_families(body) for s in f.samples if s.name == name)


class MetricsWatch(threading.Thread):
    """The worker's metrics every 2 s while a live run goes on: the largest of a few gauges."""

    WATCHED = ("preagg_records_behind", "preagg_worker_rss_bytes")

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.done, self.body = port, threading.Event(), ""
        self.most = dict.fromkeys(self.WATCHED, 0.0)

    def scrape(self) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            self.body = r.read().decode()
        for name in self.WATCHED:
            self.most[name] = max(self.most[name], metric_of(self.body, name))

    def run(self) -> None:
        while not self.done.wait(2.0):
            with contextlib.suppress(OSError):  # a slow answer: the next scrape
                self.scrape()

    def stop(self) -> str:
        self.done.set()
        self.join()
        self.scrape()
        return self.body


def percentiles(name: str, seconds: list[float]) -> dict[str, float | None]:
    """p50, p99 and the largest of ``seconds`` (``None`` each: nothing measured)."""
    xs = sorted(seconds)
    if not xs:
        return {f"{name}_p50_s": None, f"{name}_p99_s": None, f"{name}_max_s": None}
    return {
        f"{name}_p50_s": round(xs[len(xs) // 2], 2),
        f"{name}_p99_s": round(xs[max(0, int(len(xs) * 0.99) - 1)], 2),
        f"{name}_max_s": round(xs[-1], 2),
    }


def needed_writes(events: list[tuple[bytes, bytes | None]], rate: int) -> int:
    """Document writes a second to count every second's events within that second: the distinct
    pages of each second, twice (day and month), and 4 per distinct site (rollups, top pages)."""
    per_second: list[int] = []
    for i in range(0, len(events) - rate + 1, rate):
        seen = [json.loads(v) for v, _ in events[i : i + rate]]
        pages, sites = {(e["site"], e["page"]) for e in seen}, {e["site"] for e in seen}
        per_second.append(2 * len(pages) + 4 * len(sites))
    return round(statistics.mean(per_second)) if per_second else 0


def summary(name: str, shape: Shape, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of the grid: per system its mean events/s, CPU µs per event and writes; preagg's lead."""
    out: dict[str, Any] = {"shape": name, **shape.__dict__, "live_pages": rows[0]["live_pages"]}
    for system in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == system]
        rates = [r["events_per_s"] for r in mine if r["events_per_s"]]
        out[system] = {
            "events_per_s": round(sum(rates) / len(rates)) if len(rates) == len(mine) else None,
            "cpu_us_per_event": round(sum(r["cpu_us_per_event"] for r in mine) / len(mine), 1),
            "upserts": round(sum(r["upserts"] for r in mine) / len(mine)),
            "write_calls": round(sum(r["write_calls"] for r in mine) / len(mine)),
            "write_s": round(sum(r["write_s"] for r in mine) / len(mine), 1),
            "exact": all(r["mismatched_cells"] == 0 for r in mine),
        }
    mine, peer = out.get("preagg", {}).get("events_per_s"), out.get("quix-eos", {}).get("events_per_s")
    out["preagg_vs_quix_eos"] = round(mine / peer, 2) if mine and peer else None
    return out


def grid_shapes(args: argparse.Namespace) -> dict[str, Shape]:
    """The shapes to run: one from ``--sites ...`` if given, else the named ones (default: the grid)."""
    if args.sites or args.pages or args.minutes:
        default = SHAPES["long"]
        shape = Shape(
            args.sites or default.sites,
            args.pages or default.pages,
            args.minutes or default.minutes,
            args.partitions or default.partitions,
            args.keyless,
        )
        label = f"{shape.sites}x{shape.pages}x{shape.minutes}m-{shape.partitions}p" + (
            "-keyless" if shape.keyless else ""
        )
        return {label: shape}
    out = {name: SHAPES[name] for name in args.shapes}
    if args.partitions or args.keyless:
        out = {
            f"{name}-{args.partitions or s.partitions}p{'-keyless' if args.keyless else ''}": Shape(
                s.sites,
                s.pages,
                s.minutes,
                args.partitions or s.partitions,
                args.keyless or s.keyless,
                s.visitors,
            )
            for name, s in out.items()
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=250_000, help="events per shape")
    ap.add_argument("--shapes", nargs="*", default=GRID, choices=list(SHAPES), help="named shapes (the grid)")
    ap.add_argument("--sites", type=int, help="one shape instead: sites (others default to 'long')")
    ap.add_argument("--pages", type=int, help="one shape instead: Zipf pages per site")
    ap.add_argument("--minutes", type=int, help="one shape instead: minutes of event time")
    ap.add_argument("--partitions", type=int, help="partitions of the input topics")
    ap.add_argument("--keyless", action="store_true", help="events without a message key")
    ap.add_argument("--systems", nargs="*", default=["preagg", "quix-eos"])
    ap.add_argument(
        "--visitors",
        type=int,
        default=0,
        help="events name one of this many visitors (compare systems preagg and preagg-novisitors)",
    )
    ap.add_argument(
        "--max-pending-keys",
        type=int,
        help="preagg's PREAGG_MAX_PENDING_KEYS (its batch bound; default: its own)",
    )
    ap.add_argument("--reps", type=int, default=2, help="alternating repetitions of each system")
    ap.add_argument("--kill", action="store_true", help="also one kill -9 run of each system per shape")
    ap.add_argument("--quix-venv", type=Path, default=REPO / ".venv-quix")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument(
        "--live", nargs="*", default=[], choices=list(SHAPES), help="live streams over these shapes"
    )
    ap.add_argument("--live-rate", type=int, default=5000, help="events/s of the live streams")
    ap.add_argument("--live-seconds", type=float, default=300.0)
    ap.add_argument(
        "--rollups-together",
        action="store_true",
        help="the grid with PREAGG_HITS_ROLLUPS_AHEAD off (one flush writes every document)",
    )
    ap.add_argument(
        "--live-both",
        action="store_true",
        help="each live row also with PREAGG_HITS_ROLLUPS_AHEAD off (one flush writes every document)",
    )
    ap.add_argument(
        "--live-bound", type=int, default=0, help="PREAGG_MAX_PENDING_KEYS of the live runs (0: the default)"
    )
    ap.add_argument(
        "--forward-visits", action="store_true", help="preagg forwards identified hits (PREAGG_HITS_VISITS)"
    )
    ap.add_argument("--live-tree", type=Path, help="run the live worker from this checkout (an A/B of trees)")
    ap.add_argument("--out", default="bench-results/peers.json")
    args = ap.parse_args()
    wants_quix = any(s.startswith("quix") for s in args.systems)
    quix = (
        side_venv(args.quix_venv, ["quixstreams==3.28.*", "pymongo"], "Quix Streams 3.28")
        if wants_quix
        else None
    )
    results: dict[str, Any] = header(" ".join(sys.argv))
    results["events"] = args.events
    # Yesterday 14:00 UTC, whatever the time of the run: a shape's minutes never straddle
    # midnight (a run at 01:00 wrote two days' documents, 7% more writes than one at 04:00),
    # and the ticks hours later stay behind the clock.
    midnight = time.time() // 86_400 * 86_400
    end = midnight - 10 * 3600
    grid = []
    with embedded("preagg-peers-") as (base, svc):
        if args.max_pending_keys:
            base = base.with_(max_pending_keys=args.max_pending_keys)
        if args.rollups_together:
            base = base.with_stream(HITS, rollups_ahead=False)
        if args.forward_visits:  # the visits stage's first half: what forwarding costs a run
            base = base.with_stream(HITS, visits=True)
        for name, shape in grid_shapes(args).items():
            lines, truth = generate(shape, args.events, end, visitors=args.visitors or shape.visitors)
            tick = ticks(end, shape)
            single, packed = f"peers-{name}-single", f"peers-{name}-packed"
            for topic, pack in ((single, 1), (packed, 100)):
                asyncio.run(create_topic(base, topic, shape.partitions))
                asyncio.run(send_lines(base, topic, lines, pack))
                asyncio.run(send_lines(base, topic, tick, 1))
            if shape.keyless and any(s.startswith("quix") for s in args.systems):
                for rep in range(args.reps):  # one topic per run: its ticks come in late
                    for system in (s for s in args.systems if s.startswith("quix")):
                        topic = f"peers-{name}-{system}-{rep}"
                        asyncio.run(create_topic(base, topic, shape.partitions))
                        asyncio.run(send_lines(base, topic, lines, 1))
            with_ticks = truth + Counter(
                {(TICK_SITE, json.loads(v)["page"], int(tick_time(end, shape) // 60)): 1 for v, _ in tick}
            )
            rows: list[dict[str, Any]] = []
            for rep in range(args.reps):
                for system in args.systems:
                    topic = packed if system == "preagg-packed" else single
                    tag = f"{name}-{system}-{rep}".replace("-", "_")
                    late = shape.keyless and system.startswith("quix")
                    if late:
                        topic = f"peers-{name}-{system}-{rep}"
                    run = Run(system, base, topic, tag, svc, quix, shape)
                    if late:
                        run.late_ticks = tick
                    want = sum(truth.values()) + (len(tick) if system.startswith("preagg") else 0)
                    row = measure(run, truth, want, args.timeout)
                    row.update(shape=name, rep=rep, live_pages=len({(s, p) for s, p, _ in truth}))
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            results[name] = {"shape": shape.__dict__, "runs": rows}
            grid.append(summary(name, shape, rows))
            print(json.dumps(grid[-1]), flush=True)
            if args.kill:
                kills = []
                for system in args.systems:
                    if shape.keyless and system.startswith("quix"):
                        continue  # its ticks must come late (Run.late_ticks): not measured killed
                    topic = packed if system == "preagg-packed" else single
                    tag = f"{name}-{system}-kill".replace("-", "_")
                    run = Run(system, base, topic, tag, svc, quix, shape)
                    want = sum(truth.values()) + (len(tick) if system.startswith("preagg") else 0)
                    row = killed(run, truth, want, args.timeout)
                    print(json.dumps(row), flush=True)
                    kills.append(row)
                results[name]["kill"] = kills
            del with_ticks
        # The store's capacity as the backlogs measured it: preagg's document writes per
        # second of writing (the live row says what share of it live traffic needs).
        capacity = [
            r["preagg"]["upserts"] / r["preagg"]["write_s"]
            for r in grid
            if r.get("preagg", {}).get("write_s")
        ]
        for name in args.live:
            for ahead in (True, False) if args.live_both else (True,):
                at = base.with_stream(HITS, rollups_ahead=ahead)
                at = at.with_(max_pending_keys=args.live_bound) if args.live_bound else at
                row = live(at, name, args.live_rate, args.live_seconds, svc, args.live_tree)
                row["max_pending_keys"] = at.max_pending_keys
                row["rollups_ahead"] = ahead
                if capacity:
                    row["store_capacity_upserts_per_s"] = round(min(capacity))
                    row["share_of_capacity"] = round(row["upserts_per_s"] / min(capacity), 2)
                print(json.dumps(row), flush=True)
                results.setdefault("live", []).append(row)
    results["grid"] = grid
    write_results(results, args.out)


if __name__ == "__main__":
    main()
