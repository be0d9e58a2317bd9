"""Failure drills beyond kill -9 (``make chaos``): a store outage during a rebalance, poison events.

**Outage during a scale-up.** Two workers count a paced stream; a third starts, and
the store stops as soon as it is up, so the rebalance its join starts meets a store
that cannot commit; the store stays down ``outage`` seconds. Before the bounded revoke
drain (``Flusher.abandon``), the old members waited for their commits past Kafka's
rebalance timeout, were evicted, and their late commits fenced the new owners into
exit 75, again and again. The drill counts every exit by status, the drains that
gave up, and audits every counter once the store is back.

**Poison events.** One hostile event per ``every`` valid ones (nested past the
schema validator's recursion limit, NULs and invalid UTF-8, numbers past a double,
nesting past orjson's limit): every one must be a counted dead letter with its
reason; no worker may exit; every counter exact.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.core.rejection import Rejection
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.services.embedded import EmbeddedServices, free_port
from pipeline.settings import Settings
from pipeline.testing.chaos import ChaosReport, Crew, audit, catch_up, produce_paced
from pipeline.testing.traffic import generate

#: The log line of a rebalance drain that gave up on the store (pipeline/worker/rebalance.py).
GAVE_UP = re.compile(r"rebalance: uncommitted batches not committed within")


@dataclass
class DrillReport:
    """What one drill did: exits by status, drains that gave up, counter mismatches."""

    drill: str
    seed: int
    events: int
    exits: dict[int, int] = field(default_factory=dict)
    drains_given_up: int = 0
    poison: dict[str, int] = field(default_factory=dict)
    outage_seconds: float = 0.0
    #: Seconds from the store's stop until the new member held partitions (-1: never during it;
    #: Faust's sticky assignor may leave a joining member none).
    rebalanced_after: float = -1.0
    #: Longest rebalance of the old members during the outage, from its start to their new
    #: assignment (seconds; -1: none completed while the store was down).
    rebalance_seconds: float = -1.0
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every counter matched the truth."""
        return not self.mismatches


def run_outage_rebalance(
    settings: Settings,
    services: EmbeddedServices,
    seed: int,
    events: int = 20_000,
    outage: float = 90.0,
    say: Callable[[str], None] = lambda s: None,
) -> DrillReport:
    """Three workers, the store down ``outage`` s during a scale-up; ``services`` must keep data on disk."""
    traffic = generate(events, end=time.time(), days=1, seed=seed, late_share=0.0, bad_share=0.005)
    chaos = ChaosReport(seed, len(traffic.lines), traffic.valid, sum(traffic.bad.values()))
    report = DrillReport("outage-during-rebalance", seed, len(traffic.lines), outage_seconds=outage)
    began = time.monotonic()
    crew = Crew(settings, chaos, say)
    duration = outage + 30.0
    producer = threading.Thread(
        target=produce_paced, args=(settings, traffic.lines, duration, 20), daemon=True
    )
    try:
        for name in ("w0", "w1"):
            crew.start(name)
        producer.start()
        time.sleep(10.0)
        port = free_port()
        crew.start("w2", web_port=port)
        second = crew.workers["w2"]
        # Stop the store once w2 passed its start checks and its Faust app starts (its own
        # "starting: joining" line: Faust's "Starting" lines are out of the log since the
        # worker's logs went quiet): its join (and the rebalance of w0 and w1, which hold
        # uncommitted batches) meets the outage. Bounded: a worker that never gets there is
        # the drill's failure, not a wait for ever.
        deadline = time.monotonic() + 120.0
        while "starting: joining the consumer group" not in second.log_path.read_text():
            if time.monotonic() > deadline or not second.alive():
                raise RuntimeError(f"w2 did not pass its start checks: {second.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        services.stop_store()
        down = time.monotonic()
        say(f"store stopped while w2 joins; down for {outage:.0f}s")
        while time.monotonic() - down < outage:
            time.sleep(2.0)
            crew.reap()
            if report.rebalanced_after < 0 and _assigned(port):
                report.rebalanced_after = round(time.monotonic() - down, 1)
                say(f"w2 holds partitions {report.rebalanced_after}s into the outage")
        up = time.time()
        services.start_store()
        say("store started")
        report.rebalance_seconds = max(
            (
                _rebalance_seconds(crew.workers[n].log_path.read_text(), up)
                for n in ("w0", "w1")
                if n in crew.workers
            ),
            default=-1.0,
        )
        producer.join()
        catch_up(settings, crew, 300.0)
        logs = [w.log_path.read_text() for w in crew.workers.values()]
        report.drains_given_up = sum(len(GAVE_UP.findall(text)) for text in logs)
        statuses = crew.exits + crew.stop_all()
        report.exits = dict(Counter(statuses))
        report.seconds = round(time.monotonic() - began, 1)
        report.mismatches = asyncio.run(audit(settings, traffic.per_minute, chaos, dict(traffic.bad)))
    finally:
        crew.stop_all()
    return report


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def _when(line: str) -> float | None:
    m = _STAMP.match(line)
    if m is None:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000


def _rebalance_seconds(log: str, before: float) -> float:
    """From a rebalance's start (its bounded drain) to the member's next assignment, before ``before``."""
    began = None
    for line in log.splitlines():
        t = _when(line)
        if t is None or t > before:
            continue
        if "rebalance: committing what was delivered" in line:
            began = t
        elif began is not None and "assigned " in line and "partition(s)" in line:
            return round(t - began, 1)
    return -1.0


def _assigned(port: int) -> bool:
    """True when the worker on ``port`` holds at least one partition (its /health/ready says)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as r:
            body = r.read()
    except urllib.error.HTTPError as e:  # 503 while its batches wait for the store: still an answer
        body = e.read()
    except OSError:
        return False
    return bool(json.loads(body).get("assigned"))


POISON_KINDS = ("deep", "deep_top", "nul", "utf8", "huge", "nan")


def poison_line(kind: str, rng: random.Random) -> bytes:
    """One hostile event (never a newline: it travels in packed messages too)."""
    if kind == "deep":
        depth = rng.randint(256, 400)
        return b'{"site":"x","page":"/p","ts":1,"props":{"a":' + b"[" * depth + b"]" * depth + b"}}"
    if kind == "deep_top":
        return b"[" * rng.randint(1025, 3000)
    if kind == "nul":
        return b'{"site":"x\x00","page":"/\x00","ts":' + b"\x00" * rng.randint(1, 8) + b"}"
    if kind == "utf8":
        return b'{"site":"\xff\xfe","page":"/\xc3(","ts":1}'
    if kind == "huge":
        return b'{"site":"x","page":"/p","ts":' + b"9" * rng.randint(20, 400) + b"}"
    return b'{"site":"x","page":"/p","ts":NaN}'


def run_poison(
    settings: Settings,
    seed: int,
    events: int = 20_000,
    every: int = 1_000,
    say: Callable[[str], None] = lambda s: None,
) -> DrillReport:
    """Two workers, one poison event per ``every``: no exit, every poison a dead letter, counts exact."""
    rng = random.Random(seed)
    traffic = generate(events, end=time.time(), days=1, seed=seed, late_share=0.0, bad_share=0.0)
    decoder = HitDecoder(settings.max_event_bytes, settings.future_skew)
    lines: list[tuple[bytes, bytes]] = []
    bad: Counter[str] = Counter()
    poison: Counter[str] = Counter()
    for i, (line, key) in enumerate(traffic.lines, 1):
        lines.append((line, key))
        if i % every == 0:
            kind = rng.choice(POISON_KINDS)
            raw = poison_line(kind, rng)
            got = decoder.decode(raw)
            assert isinstance(got, Rejection), (kind, got)
            bad[got.reason] += 1
            poison[kind] += 1
            lines.append((raw, key))
    chaos = ChaosReport(seed, len(lines), traffic.valid, sum(bad.values()))
    report = DrillReport("poison", seed, len(lines), poison=dict(poison))
    began = time.monotonic()
    crew = Crew(settings, chaos, say)
    try:
        for name in ("w0", "w1"):
            crew.start(name)
        produce_paced(settings, lines, 20.0, 20)
        catch_up(settings, crew, 240.0)
        statuses = crew.exits + crew.stop_all()
        report.exits = dict(Counter(statuses))
        report.seconds = round(time.monotonic() - began, 1)
        report.mismatches = asyncio.run(audit(settings, traffic.per_minute, chaos, dict(bad)))
    finally:
        crew.stop_all()
    say(f"poison by reason {dict(bad)}")
    return report
