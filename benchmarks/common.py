"""What every benchmark does around its measurements: private embedded services, steps, results."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.kafka.producer import send_lines
from pipeline.kinds import named
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import EmbeddedServices
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

#: The public data sets (``--data``): ``../shared/data`` beside the checkout by default,
#: from whichever clone the benchmark runs (``make bench-*`` runs at its top level).
DEFAULT_DATA = Path("../shared/data")
_data = [DEFAULT_DATA]


def add_data_option(ap: argparse.ArgumentParser) -> None:
    """``--data DIR``: where the public data sets are."""
    ap.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"public data sets (default {DEFAULT_DATA})"
    )


def use_data(directory: Path) -> None:
    """Read data sets from ``directory`` from now on (the parsed ``--data``)."""
    _data[0] = directory


def data_file(relative: str) -> Path:
    """A data set's file under the ``--data`` directory (it may be missing: callers say so)."""
    return _data[0] / relative


@contextmanager
def embedded(prefix: str, partitions: int = 4) -> Iterator[tuple[Settings, EmbeddedServices]]:
    """Settings on a private pair of embedded services, stopped afterwards."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    svc = EmbeddedServices(home)
    base = for_embedded(Settings(home=home, partitions=partitions, log_flushes=True), svc.start())
    try:
        yield base, svc
    finally:
        svc.stop()


def drill_settings(base: Settings, folder: str, tag: str) -> Settings:
    """Settings of one drill run on shared embedded services: its own home, topics, group and
    database, short flushes and sessions (rebalances in seconds), a small memory bound."""
    return named(
        base.with_(
            home=base.home / folder,
            flush_interval=0.5,
            session_timeout=6.0,
            max_pending_keys=2_000,
        ),
        tag,
    )


def header(command: str) -> dict[str, Any]:
    """What every result file starts with: the machine, the time, the command that made it."""
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
    }


def step(results: dict[str, Any], key: str, title: str, fn: Callable[[], Any]) -> None:
    """Run one measurement, keep its result under ``key`` and print it."""
    print(f"{title} ...", flush=True)
    results[key] = fn()
    print(json.dumps(results[key]), flush=True)


def write_results(results: dict[str, Any], out: str) -> Path:
    """Write the results as JSON (``bench-results/*.json``)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
    print(f"results in {path}")
    return path


def latency_ms(times_ms: list[float], digits: int = 2) -> dict[str, float]:
    """p50 and p99 of latencies in milliseconds (``digits``: 3 for sub-millisecond reads)."""
    ordered = sorted(times_ms)
    return {
        "p50_ms": round(ordered[len(ordered) // 2], digits),
        "p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], digits),
    }


def timed_worker_run(
    settings: Settings, topic: str, events: Sequence[tuple[bytes, bytes | None]], name: str
) -> float:
    """Warm a worker, then time ``events`` from first send to all committed."""
    asyncio.run(send_lines(settings, topic, events[:1]))
    w = WorkerProcess(settings, name).start()
    try:
        asyncio.run(wait_caught_up(settings, [topic], timeout=120, poll=0.2))
        began = time.perf_counter()
        asyncio.run(send_lines(settings, topic, events[1:]))
        asyncio.run(wait_caught_up(settings, [topic], timeout=900, poll=0.1))
        return time.perf_counter() - began
    finally:
        w.terminate()


def coll_stats(db: Any, name: str) -> dict[str, Any]:
    """collStats figures of a collection (an error note if the store has no collStats)."""
    try:
        st = db.command("collStats", name)
        return {k: st.get(k) for k in ("count", "size", "storageSize", "totalIndexSize", "avgObjSize")}
    except Exception as exc:  # a store without collStats: say so in the results
        return {"error": str(exc)[:200]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process, all its threads (Linux ``/proc``; children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float | None:
    """The highest resident memory of one process so far, in MB (Linux ``VmHWM``; ``None``: gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kb = next((int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmHWM:")), None)
    return None if kb is None else round(kb / 1024, 1)


def side_venv(venv: Path, packages: list[str], what: str) -> Path:
    """The interpreter of a benchmark's own virtual environment (a peer, not a preagg dependency).

    Created with ``packages`` on first use: ``.venv-quix`` (Quix Streams), ``.venv-pg`` (psycopg).
    """
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} with {what} (not a preagg dependency) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


def http_connection(url: str) -> http.client.HTTPConnection:
    """A kept-alive connection to the server of ``url`` (``preagg serve``)."""
    where = urlsplit(url)
    return http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)


def timed_request(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[float, bytes]:
    """One request's milliseconds and answer; anything but a 200 is a ``RuntimeError``."""
    began = time.perf_counter()
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    took = (time.perf_counter() - began) * 1000
    if resp.status != 200:
        raise RuntimeError(f"{method} {path}: {resp.status} {payload[:300]!r}")
    return took, payload
