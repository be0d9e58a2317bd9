"""Chaos drill: kill -9 and restart workers at random moments of an ingest, then audit.

A seeded driver (reproducible schedule) plays the supervisor of 2–3 ``preagg worker``
processes while a known stream is produced at a steady pace:

* ``kill -9`` a random worker, restart it after a random pause;
* restart some with fault injection (``after-commit:N``): they die right after a
  MongoDB commit and before the Kafka commit, the window random kills rarely hit;
* add a third replica and later stop it gracefully (clean rebalances);
* restart any worker that exits on its own (fenced: 75; injected fault: 137).

When production ends, the last faults are cleared, the group catches up, and every
counter is audited against the truth (:mod:`pipeline.testing.audit`), together with the
per-worker event totals and dead-letter counts of the ops documents.

With the visits stage on (``settings``' hits ``visits``), the hits name visitors, the faults
also hit the stage's own flushes (both phases of its commit), and the sessions invariant is
audited too (:mod:`pipeline.testing.visits_truth`): one hit of the present closes every visit,
then each site-day's visits, bounces, views, durations, entries and exits must equal the rule's.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.kafka.producer import EventProducer
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import uncounted
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.audit import audit_hits
from pipeline.testing.traffic import Traffic, generate
from pipeline.testing.visits_truth import stored_visits_of, visit_mismatches, visits_truth
from pipeline.worker.exits import EXIT_FENCED
from pipeline.worker.process import WorkerProcess


@dataclass
class ChaosReport:
    """What one drill did and whether the aggregates came out exact."""

    seed: int
    events: int
    valid: int
    bad: int
    kills: int = 0
    fault_exits: int = 0
    fenced_exits: int = 0
    other_exits: int = 0
    scale_ups: int = 0
    scale_downs: int = 0
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    #: The hits' truth the drill audited against (per site, page and minute).
    truth: Counter[tuple[str, str, int]] = field(default_factory=Counter)

    @property
    def faults(self) -> int:
        """Crashes survived: kills, injected faults and fenced exits."""
        return self.kills + self.fault_exits + self.fenced_exits + self.other_exits

    @property
    def ok(self) -> bool:
        """True when every counter matched the truth."""
        return not self.mismatches


#: The drill's traffic: two days of hits, produced in chunks of a 40th.
DAYS, CHUNKS = 2, 40
#: The visits stage's grace in the drill. The drill compresses two days of event time into
#: seconds of producing, so a worker's few seconds of restart, or a partition's pack sent a chunk
#: after another's, put one partition's hits hours of event time behind the others': live
#: traffic's grace covers its outages in seconds, this one covers the whole span (visits then
#: close once the drill's last hit, dated now, has been read; docs/visits.md, "Limits").
VISITS_GRACE = DAYS * 86400.0


def produce_paced(settings: Settings, lines: list[tuple[bytes, bytes]], duration: float, pack: int) -> None:
    async def run() -> None:
        chunks = CHUNKS
        step = max(1, len(lines) // chunks)
        began = time.monotonic()
        async with EventProducer(settings, settings.topic("hits"), pack) as p:
            for i in range(0, len(lines), step):
                for line, key in lines[i : i + step]:
                    await p.send_raw(line, key)
                await p.flush()
                ahead = began + duration * (i + step) / len(lines) - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)

    asyncio.run(run())


class Crew:
    """The supervised worker processes of a drill."""

    def __init__(self, settings: Settings, report: ChaosReport, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.report = report
        self.say = say
        self.workers: dict[str, WorkerProcess] = {}
        #: Exit status of every worker that ended on its own.
        self.exits: list[int] = []

    def start(self, name: str, fault: str = "", **changes: Any) -> None:
        self.workers[name] = WorkerProcess(self.settings.with_(fault=fault, **changes), name).start()
        self.say(f"start {name}{' with fault ' + fault if fault else ''}")

    def reap(self, restart: bool = True) -> None:
        """Count workers that exited on their own and restart them (the supervisor's job)."""
        for name, w in list(self.workers.items()):
            if w.alive():
                continue
            rc = w.terminate()
            self.exits.append(rc)
            if rc == EXIT_FENCED:
                self.report.fenced_exits += 1
            elif rc == 137:
                self.report.fault_exits += 1
            else:
                self.report.other_exits += 1
            self.say(f"{name} exited with {rc}")
            del self.workers[name]
            if restart:
                self.start(name)

    def stop_all(self) -> list[int]:
        """Stop every worker (SIGTERM); their exit statuses."""
        return [w.terminate() for w in self.workers.values()]


def run_chaos(
    settings: Settings,
    seed: int,
    events: int = 20_000,
    duration: float = 30.0,
    pack: int = 20,
    say: Callable[[str], None] = lambda s: None,
    catch_up_timeout: float = 240.0,
    topics: list[str] | None = None,
) -> ChaosReport:
    """One drill on ``settings`` (fresh topic, group and database expected).

    ``topics``: every topic the group must have counted before the workers stop (default: hits).
    """
    rng = random.Random(seed)
    visits = settings.of(HITS).visits
    if visits:
        settings = settings.with_stream(HITS, visit_grace=VISITS_GRACE)
    stage = settings.of(HITS).visits_topic
    topics = [*(topics or [settings.topic("hits")]), *([stage] if visits else [])]
    traffic = drill_traffic(events, seed, visits)
    report = ChaosReport(seed, len(traffic.lines), traffic.valid, sum(traffic.bad.values()))
    report.truth = traffic.per_minute
    began = time.monotonic()
    crew = Crew(settings, report, say)
    producer = threading.Thread(
        target=produce_paced, args=(settings, traffic.lines, duration, pack), daemon=True
    )
    try:
        for name in ("w0", "w1"):
            crew.start(name)
        producer.start()
        while producer.is_alive():
            time.sleep(rng.uniform(2.0, 7.0))
            crew.reap()
            action = rng.random()
            # A worker armed with a fault is left to die by it.
            targets = sorted(n for n, w in crew.workers.items() if not w.settings.fault)
            if action < 0.6 and targets:
                name = rng.choice(targets)
                crew.workers.pop(name).kill()
                report.kills += 1
                say(f"kill -9 {name}")
                time.sleep(rng.uniform(0.0, 2.0))
                point = rng.choice(("after-commit", "mid-commit"))
                fault = f"{point}:{rng.randint(1, 3)}" if rng.random() < 0.4 else ""
                if visits and rng.random() < 0.5:  # the same points, in the visits stage's flushes
                    fault = f"{rng.choice(('early-commit', 'mid-commit'))}:{rng.randint(1, 3)}:{stage}"
                crew.start(name, fault)
            elif action < 0.8 and "w2" not in crew.workers:
                crew.start("w2")
                report.scale_ups += 1
            elif "w2" in crew.workers:
                crew.workers.pop("w2").terminate()
                report.scale_downs += 1
                say("stop w2 (scale down)")
        producer.join()
        catch_up(settings, crew, catch_up_timeout, topics)
        if visits:
            report.mismatches += close_visits(settings, crew, report, traffic, catch_up_timeout, topics)
        crew.stop_all()
        report.seconds = time.monotonic() - began
        report.mismatches += asyncio.run(audit(settings, report.truth, report, dict(traffic.bad)))
    finally:
        crew.stop_all()
    return report


def drill_traffic(events: int, seed: int, visits: bool) -> Traffic:
    """The drill's hits: live, a tenth late, a hundredth bad; with visits, visitors name them and
    they end a grace and a day ago, in time order (a hit later than the stage's grace would split
    a visit, which the rule applied in time order does not: docs/visits.md, "Limits")."""
    if not visits:
        return generate(events, end=time.time(), days=DAYS, seed=seed, late_share=0.1, bad_share=0.01)
    people = max(50, events // 40)
    end = time.time() - VISITS_GRACE - 86400
    return generate(events, end=end, days=DAYS, seed=seed, late_share=0, bad_share=0.01, visitors=people)


def close_visits(
    settings: Settings,
    crew: Crew,
    report: ChaosReport,
    traffic: Traffic,
    timeout: float,
    topics: list[str],
) -> list[str]:
    """One hit of the present (the stage's event time passes every visit of the drill), then the
    sessions invariant: what is stored, once equal to the truth or ``timeout`` s later, against it."""
    now = round(time.time(), 3)
    tick = orjson.dumps({"site": "tick.example", "page": "/", "ts": now, "visitor": "clock"})
    produce_paced(settings, [(tick, b"tick")], 0.0, 1)
    report.truth[("tick.example", "/", int(now // 60))] += 1
    report.events += 1
    report.valid += 1
    catch_up(settings, crew, timeout, topics)
    want = visits_truth(traffic, settings.of(HITS).visit_timeout)
    deadline = time.monotonic() + timeout
    while (got := asyncio.run(stored_visits_of(settings))) != want and time.monotonic() < deadline:
        crew.reap()
        time.sleep(0.5)  # the tick's visits flush may follow the wait by a moment
    return visit_mismatches(got, want)


def catch_up(settings: Settings, crew: Crew, timeout: float, topics: list[str] | None = None) -> None:
    """Replace faulty workers by clean ones and wait until the group committed everything: a
    stall is ``timeout`` seconds without any ledger moving (a schedule of frequent step-downs,
    each costing the driver seconds to find the primary again, is slow, not stalled), and the
    whole wait is bounded at four times that."""
    for name, w in list(crew.workers.items()):
        if w.settings.fault:
            crew.workers.pop(name).kill()
            crew.start(name)
    began = time.monotonic()
    deadline = began + timeout
    topics = topics or [settings.topic("hits")]
    before: list[tuple[str, int, int, int]] | None = None
    while True:
        crew.reap()
        # (The drills' producers are not transactional: every partition ends at a record, which
        # its ledgers pass once they counted it.)
        left = asyncio.run(uncounted(settings, topics))
        if left == []:
            return
        now = time.monotonic()
        if left != before:
            before, deadline = left, min(now + timeout, began + 4 * timeout)
        if now > deadline:
            raise TimeoutError(f"group not caught up after chaos: (topic, partition, ledgers, end) {left}")
        time.sleep(1.0)


async def audit(settings: Settings, truth: Any, report: ChaosReport, bad: dict[str, int]) -> list[str]:
    client = mongo_client(settings.mongo_url or "")
    try:
        db = client[settings.db]
        problems = await audit_hits(db, truth, hits_fields(settings.schema))
        totals = ledger_totals(await read_ledger(db, settings.group_id, [settings.topic("hits")]))
        if totals.events != report.events:
            problems.append(f"ledger counts {totals.events} events, {report.events} were produced")
        dead = totals.rejected
        if dead != bad:
            problems.append(f"dead letters counted {dead}, produced {bad}")
        return problems
    finally:
        await client.close()
