"""Ingest benchmark (``make bench-ingest``): what one worker reads per second, and from what producers.

Side by side in one run on the embedded services, each over a topic filled beforehand
(a backlog, so the figure is the consumer's capacity, not the producer's):

1. raw aiokafka ``getmany`` over single-event messages: the client's limit;
2. a stock Faust agent that only counts them: Faust's per-message limit;
3. the worker, one JSON event per message, keyed;
4. the worker, one event per message, keyless (spread round robin);
5. the worker, Filebeat envelopes around access-log lines, keyless (``PREAGG_HITS_FORMAT=filebeat``);
6. the worker, packed messages (100 events each);
7. the worker, one event per message, keyed, each naming one of 20,000 visitors: unique
   visitors on (the default) and off (``PREAGG_HITS_VISITORS=false``), the same bytes.

For the worker: events/s and its CPU seconds per 100k events, from the first record a
worker receives to the last commit (the whole backlog: reading, counting and the last
flush after the backlog is read). Then the public Apache access log is replayed bare
(``clf``) and as each shipper sends it (one line per message, keyless, ``auto``): the
stored counts must be equal.

    python -m benchmarks.ingest --out bench-results/ingest.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from pymongo import MongoClient

from benchmarks.common import add_data_option, cpu_seconds, embedded, header, use_data, write_results
from benchmarks.common import step as run_step
from benchmarks.hits import access_log, realtime_events
from benchmarks.peers import SHAPES
from benchmarks.peers import generate as peer_events
from benchmarks.steady import FLUSHED, metric
from pipeline.core.families import family_of
from pipeline.core.shippers import SHIPPERS, envelope
from pipeline.files import lines, shipped
from pipeline.kafka.options import kafka_client_kwargs
from pipeline.kafka.producer import produce_records, send_lines
from pipeline.kinds import named
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.store.offsets import OFFSETS_COLLECTION
from pipeline.worker.process import WorkerProcess

TICKS = os.sysconf("SC_CLK_TCK")


def _fill(settings: Settings, topic: str, events: Iterable[tuple[bytes, bytes | None]], pack: int) -> float:
    started = time.perf_counter()
    asyncio.run(send_lines(settings, topic, events, pack))
    return time.perf_counter() - started


def worker_run(
    base: Settings,
    name: str,
    events: Sequence[tuple[bytes, bytes | None]],
    pack: int,
    workers: int = 1,
    tree: Path | None = None,
    **hits: Any,
) -> dict[str, Any]:
    """Fill a topic, start the workers, measure events/s and CPU from the first to the last commit."""
    settings = named(base, f"ingest-{name}").with_(kinds=("hits",))
    settings = settings.with_stream(HITS, **hits)
    topic = settings.topic("hits")
    fill_s = _fill(settings, topic, events, pack)
    total = len(events)
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    ledger = client[settings.db][OFFSETS_COLLECTION]
    ports = [free_port() for _ in range(workers)]
    procs = [
        WorkerProcess(settings.with_(web_port=port), f"ingest-{name}-{i}", tree).start()
        for i, port in enumerate(ports)
    ]
    # Measured from the first record a worker received (it logs the partition's stored
    # position then) to the last commit: the whole backlog, its consumption and its commits.
    first: tuple[float, float] | None = None

    def cpu() -> float:
        return sum(cpu_seconds(w.pid) for w in procs if w.alive())

    try:
        deadline = time.monotonic() + 900
        counted = 0
        while time.monotonic() < deadline:
            now, used = time.perf_counter(), cpu()
            if first is None:
                if any("positions from MongoDB" in w.log_path.read_text() for w in procs):
                    first = (now, used)
            else:
                counted = sum(
                    d.get("events", 0)
                    for d in ledger.find({"group": settings.group_id})
                    if family_of(str(d.get("topic"))) is None  # a family's ledger counts the same events
                )
                if counted >= total:
                    break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"{name}: {counted} of {total} events counted after 900 s")
        upserts = sum(int(d.get("docs", 0)) for d in ledger.find({"group": settings.group_id}))
        bodies = []
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                bodies.append(r.read().decode())
    finally:
        for w in procs:
            w.terminate()
        client.close()
    assert first is not None
    t0, c0 = first
    span, used = now - t0, used - c0
    flushes = [float(m.group(5)) for w in procs for m in FLUSHED.finditer(w.log_path.read_text())]
    return {
        "events": total,
        "pack": pack,
        "workers": workers,
        "fill_seconds": round(fill_s, 2),
        "seconds": round(span, 2),
        "events_per_s": round(total / span),
        "cpu_seconds_per_100k": round(used / total * 100_000, 2),
        "cpu_share": round(used / span, 2),
        "write_conflicts": int(sum(metric(b, "preagg_write_conflicts_total", "hits") or 0 for b in bodies)),
        "failed_commits": int(sum(metric(b, "preagg_commit_failures_total", "hits") or 0 for b in bodies)),
        "flushes": len(flushes),
        "slowest_flush_s": max(flushes, default=0.0),
        "upserts": upserts,
    }


def raw_getmany(base: Settings, n: int) -> dict[str, Any]:
    """aiokafka's own limit: ``getmany`` over ``n`` single-event messages, nothing else."""
    topic = "ingest-raw"
    _fill(base, topic, realtime_events(n), 1)

    async def read() -> tuple[float, float]:
        c = AIOKafkaConsumer(
            topic,
            **kafka_client_kwargs(base),
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got, began, cpu0 = 0, 0.0, 0.0
        try:
            while got < n:
                batch = await c.getmany(timeout_ms=1000, max_records=2000)
                if not began and batch:
                    began, cpu0 = time.perf_counter(), time.process_time()
                got += sum(len(m) for m in batch.values())
            return time.perf_counter() - began, time.process_time() - cpu0
        finally:
            await c.stop()

    took, cpu = asyncio.run(read())
    return {"events": n, "events_per_s": round(n / took), "cpu_seconds_per_100k": round(cpu / n * 100_000, 2)}


FAUST_COUNTER = """
import os, time, faust
bootstrap, topic, n = os.environ["BENCH_BOOTSTRAP"], os.environ["BENCH_TOPIC"], int(os.environ["BENCH_N"])
app = faust.App("ingest-faust-count", broker="kafka://" + bootstrap, store="memory://", web_enabled=False,
                consumer_auto_offset_reset="earliest", broker_session_timeout=10.0,
                broker_heartbeat_interval=3.0, recovery_consistency_check=False, autodiscover=False,
                datadir=os.environ["BENCH_DATADIR"])
source = app.topic(topic, key_serializer="raw", value_serializer="raw")
seen = {"n": 0, "t0": 0.0, "c0": 0.0}

@app.agent(source)
async def count(stream):
    async for _ in stream.events():
        if not seen["n"]:
            seen["t0"], seen["c0"] = time.perf_counter(), time.process_time()
        seen["n"] += 1
        if seen["n"] >= n:
            took, cpu = time.perf_counter() - seen["t0"], time.process_time() - seen["c0"]
            print(f"RESULT {n / took:.0f} {cpu / n * 100000:.2f}", flush=True)
            os._exit(0)

app.main()
"""


def faust_count(base: Settings, n: int) -> dict[str, Any]:
    """Faust's own limit: a stock agent iterating the stream and counting, nothing else."""
    topic = "ingest-faust"
    _fill(base, topic, realtime_events(n), 1)
    script = Path(base.home) / "faust_count.py"
    script.write_text(FAUST_COUNTER)
    done = subprocess.run(
        [sys.executable, str(script), "worker", "-l", "warn"],
        env={
            **os.environ,
            "BENCH_BOOTSTRAP": base.kafka_bootstrap,
            "BENCH_TOPIC": topic,
            "BENCH_N": str(n),
            "BENCH_DATADIR": str(Path(base.home) / "faust-count"),
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    # Faust's worker sends stdout to its log: the line may come on either stream.
    result = [line for line in (done.stdout + done.stderr).splitlines() if "RESULT " in line]
    if not result:
        raise RuntimeError(f"stock Faust counter failed: {done.stderr[-2000:]}")
    rate, cpu = result[0].split("RESULT ", 1)[1].split()[:2]
    return {"events": n, "events_per_s": int(rate), "cpu_seconds_per_100k": float(cpu)}


def with_visitors(
    events: Sequence[tuple[bytes, bytes | None]], people: int
) -> list[tuple[bytes, bytes | None]]:
    """The same events, each naming one of ``people`` visitors (log-uniform: a few return often)."""
    out: list[tuple[bytes, bytes | None]] = []
    for i, (raw, key) in enumerate(events):
        e = orjson.loads(raw)
        e["visitor"] = f"u{int(people ** ((i * 0.6180339887) % 1.0)) - 1}"
        out.append((orjson.dumps(e), key))
    return out


def filebeat_events(n: int) -> list[tuple[bytes, bytes | None]]:
    """``n`` access-log lines of the last 10 minutes (3 sites' hosts, 200 pages), in Filebeat envelopes."""
    out: list[tuple[bytes, bytes | None]] = []
    for raw, _ in realtime_events(n):
        e = orjson.loads(raw)
        when = datetime.fromtimestamp(e["ts"], UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")
        line = f'10.1.2.3 - - [{when}] "GET {e["page"]} HTTP/1.1" 200 512 "-" "Mozilla/5.0 Firefox/120.0"'
        out.append((envelope(line, "filebeat", e["ts"], e["site"], "/var/log/nginx/access.log"), None))
    return out


def access_log_replays(base: Settings) -> dict[str, Any] | None:
    """The public access log bare (clf) and as each shipper sends it: stored counts must be equal."""
    if not access_log().exists():
        return None
    site = "semicomplete.com"
    totals: dict[str, Any] = {}
    for send_as in ("line", *SHIPPERS):
        settings = named(base, f"replay-{send_as}").with_(kinds=("hits",))
        fmt = "clf" if send_as == "line" else "auto"
        settings = settings.with_stream(HITS, format=fmt, site=site)
        topic = settings.topic("hits")
        records = shipped([str(access_log())], send_as, "web-1", time.time)
        summary = asyncio.run(produce_records(settings, topic, records, 1))
        worker = WorkerProcess(settings, f"replay-{send_as}").start()
        try:
            asyncio.run(wait_caught_up(settings, [topic], timeout=600, poll=0.2))
        finally:
            worker.terminate()
        client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
        f = hits_fields(settings.schema).daily
        docs = {d["_id"]: d[f.total] for d in client[settings.db][f.collection].find({}, {f.total: 1})}
        client.close()
        totals[send_as] = {"messages": summary.messages, "hits": sum(docs.values()), "docs": docs}
    bare = totals["line"]["docs"]
    out: dict[str, Any] = {"lines": sum(1 for _ in lines([str(access_log())]))}
    for send_as, t in totals.items():
        out[send_as] = {"messages": t["messages"], "hits": t["hits"], "equal_to_clf": t["docs"] == bare}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--single", type=int, default=500_000, help="events of each single-event run")
    ap.add_argument("--packed", type=int, default=1_000_000, help="events of the packed run")
    ap.add_argument("--faust", type=int, default=100_000, help="events through the stock Faust agent")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (a git worktree of an older commit): its worker also runs the keyed "
        "single-event and the packed streams, side by side",
    )
    ap.add_argument("--only", nargs="*", help="steps to run (default: all), e.g. single_keyless_3_workers")
    ap.add_argument("--out", default="bench-results/ingest.json")
    add_data_option(ap)
    args = ap.parse_args()
    use_data(args.data)
    results: dict[str, Any] = header("make bench-ingest")
    single = realtime_events(args.single)

    def step(results: dict[str, Any], key: str, title: str, fn: Callable[[], Any]) -> None:
        if not args.only or key in args.only:
            run_step(results, key, title, fn)

    with embedded("preagg-bench-ingest-") as (base, _):
        step(
            results,
            "raw_getmany",
            "raw aiokafka getmany, single-event messages",
            lambda: raw_getmany(base, args.single),
        )
        step(
            results,
            "faust_count",
            "stock Faust agent counting, single-event messages",
            lambda: faust_count(base, args.faust),
        )
        step(
            results,
            "single_keyed",
            "worker, one event per message, keyed",
            lambda: worker_run(base, "keyed", single, 1),
        )
        keyless = [(line, None) for line, _ in single]
        step(
            results,
            "single_keyless",
            "worker, one event per message, keyless",
            lambda: worker_run(base, "keyless", keyless, 1),
        )
        step(
            results,
            "single_keyless_3_workers",
            "3 workers, one event per message, keyless: every document written by every worker",
            lambda: worker_run(base, "keyless3", keyless, 1, workers=3),
        )
        beats = filebeat_events(args.single) if not args.only or "filebeat_clf" in args.only else []
        step(
            results,
            "filebeat_clf",
            "worker, Filebeat envelopes around access-log lines, keyless",
            lambda: worker_run(base, "filebeat", beats, 1, format="filebeat", site_field="host"),
        )
        # Many live documents: 10,000 Zipf pages (50 sites x 200) over 50 minutes. A shape
        # where few documents are live hid that batches sealed at 2,000 documents rewrote
        # each document every couple of events: upserts are reported.
        zipf, _ = peer_events(SHAPES["zipf10k"], args.single, time.time() - 3 * 3600)
        step(
            results,
            "single_keyed_10k_pages",
            "worker, one event per message, keyed, 10,000 live Zipf pages",
            lambda: worker_run(base, "zipf10k", zipf, 1),
        )
        people = (
            with_visitors(single, 20_000) if not args.only or any("visitors" in o for o in args.only) else []
        )

        def visitors_run(on: bool) -> Callable[[], Any]:
            return lambda: worker_run(base, f"visitors-{'on' if on else 'off'}", people, 1, visitors=on)

        for tag, on in (("on", True), ("off", False)):
            step(
                results,
                f"single_keyed_visitors_{tag}",
                f"worker, one event per message, keyed, 20,000 visitors, unique visitors {tag}",
                visitors_run(on),
            )
        packed = realtime_events(args.packed, seed=2)
        step(
            results,
            "packed",
            "worker, packed messages (100 events each)",
            lambda: worker_run(base, "packed", packed, 100),
        )
        if args.baseline:
            tree = args.baseline.resolve()
            results["baseline"] = str(tree)
            step(
                results,
                "baseline_single_keyed",
                f"baseline worker ({tree}), one event per message, keyed",
                lambda: worker_run(base, "base-keyed", single[: args.single // 5], 1, tree=tree),
            )
            step(
                results,
                "baseline_packed",
                f"baseline worker ({tree}), packed messages (100 events each)",
                lambda: worker_run(base, "base-packed", packed, 100, tree=tree),
            )
        step(
            results,
            "access_log",
            "access log: bare and as each shipper sends it",
            lambda: access_log_replays(base),
        )
    write_results(results, args.out)


if __name__ == "__main__":
    main()
