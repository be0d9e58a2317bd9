"""Visits in a steady state (a step of ``make bench-visits``): live keyless hits of returning
visitors, one event per message as log shippers send them, through one worker with visits off
and then on, side by side in one run.

The producer offers ``rate`` hits a second stamped "now" for ``minutes``: 5 sites, ``pages`` Zipf
pages each (200 by default), ``visitors`` people picked uniformly (each comes back every ``visitors / rate``
seconds on average). The visit timeout is cut to ``timeout`` seconds so that a few minutes hold
what a day does: visits opening, growing and closing all the time, the open ones saved at every
flush. Each run reports the worker's CPU per event, how long after the producer stopped
everything was counted (the visits stage included), the visits it closed and held open at the
end, and its flushes of the visits topic.
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import time
import urllib.request
from collections import Counter
from typing import Any

import orjson

from benchmarks.common import cpu_seconds, peak_rss_mb
from benchmarks.steady import SITES, Events, Stream, _offer, _wait_assigned, _zipf
from pipeline.core.times import minute_of
from pipeline.kinds import named
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.aggregate import Key
from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

#: A flush of the visits topic, from the worker's log: its documents and seconds.
FLUSHED = re.compile(r"flushed (hits-visits\S*): (\d+) events, .*?, (\d+) docs(?:, \d+ bytes)? in ([\d.]+)s")


def returning(visitors: int, pages: int = 200) -> Any:
    """Hits of ``visitors`` people on 5 sites × ``pages`` Zipf pages, at the current time."""

    def make(rng: random.Random, n: int, now: float, truth: Counter[Key]) -> Events:
        out = []
        for p in _zipf(rng, pages, n):
            who = rng.randrange(visitors)
            site, page, ts = SITES[who % 5], f"/page/{p}", round(now + rng.random(), 3)
            truth[(site, page, minute_of(ts))] += 1
            ev = {"site": site, "page": page, "ts": ts, "visitor": f"u{who}"}
            out.append((orjson.dumps(ev), site.encode()))
        return out

    return make


def gauge(body: str, name: str) -> float | None:
    """An unlabelled metric's value in a ``/metrics`` body."""
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def live(
    base: Settings, on: bool, minutes: float, rate: int, visitors: int, timeout: float, pages: int = 200
) -> dict[str, Any]:
    """One run, visits ``on`` or off."""
    tag = f"{'on' if on else 'off'}-{pages}-{base.partitions}"
    settings = named(base, f"visits-steady-{tag}").with_stream(
        HITS, visits=on, visit_timeout=timeout, visit_grace=5.0
    )
    topic = settings.topic("hits")
    topics = [topic, settings.of(HITS).visits_topic] if on else [topic]
    port = free_port()
    w = WorkerProcess(settings.with_(web_port=port), f"visits-steady-{tag}").start()
    try:
        _wait_assigned(port)
        cpu0 = cpu_seconds(w.pid)
        truth: Counter[Key] = Counter()
        began = time.monotonic()
        stream = Stream("hits", rate, returning(visitors, pages))
        sent = asyncio.run(_offer(settings, topic, stream, 60 * minutes, truth, pack=1, keyless=True))
        offered = time.monotonic()
        asyncio.run(wait_caught_up(settings, topics, timeout=600, poll=0.5))
        after = time.monotonic() - offered
        cpu = cpu_seconds(w.pid) - cpu0
        rss = peak_rss_mb(w.pid)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
    finally:
        w.terminate()
    flushes = [(int(m.group(3)), float(m.group(4))) for m in FLUSHED.finditer(w.log_path.read_text())]
    secs = sorted(s for _, s in flushes)
    return {
        "live_pages": len({(site, page) for site, page, _ in truth}),
        "sent": sent,
        "offered_per_s": rate,
        "produce_seconds": round(offered - began, 1),
        "all_counted_after_s": round(after, 1),
        "worker_cpu_us_per_event": round(cpu / max(sent, 1) * 1e6, 1),
        "worker_peak_rss_mb": rss,
        "visits_closed": gauge(body, "preagg_visits_closed_total"),
        "visits_open_at_end": gauge(body, "preagg_visits_open"),
        "visit_flushes": len(flushes),
        "visit_flush_s_p50": secs[len(secs) // 2] if secs else None,
        "visit_flush_s_max": secs[-1] if secs else None,
        "visit_flush_docs_mean": round(statistics.mean(d for d, _ in flushes), 1) if flushes else None,
    }


def steady(
    base: Settings,
    minutes: float = 3.0,
    rate: int = 1_000,
    visitors: int = 20_000,
    timeout: float = 60.0,
    pages: int = 200,
    partitions: int = 4,
) -> dict[str, Any]:
    """Visits off, then on, on the same live shape; the on run's CPU against the off run's."""
    base = base.with_(partitions=partitions)
    off = live(base, False, minutes, rate, visitors, timeout, pages)
    on = live(base, True, minutes, rate, visitors, timeout, pages)
    return {
        "minutes": minutes,
        "visitors": visitors,
        "pages_per_site": pages,
        "partitions": partitions,
        "timeout_s": timeout,
        "off": off,
        "on": on,
        "cpu_per_event_off_over_on": round(off["worker_cpu_us_per_event"] / on["worker_cpu_us_per_event"], 2),
    }
