"""Seeded fault schedules: the chaos drill's kills and crashes, with the store's answers played by the
fault proxy (rival inserts, lost answers, bulk writes cut by a step-down, slow commands), then every
counter and ledger audited.

A schedule is drawn from its seed: the proxy's fault rates, and (through
:func:`pipeline.testing.chaos.run_chaos`) when workers are killed, crashed inside or right after a
commit, added and stopped, while the same workers count hits (paced), impressions, relations and
listens (keyless backlogs: :mod:`pipeline.testing.kinds_truth`). The invariant checked after the
group has caught up: every stored counter of every kind equals the truth (hits with their site
rollups and top pages; impressions exact; relations without a false negative; listens' sketches
exact below their explicit threshold), the ledgers count every event of every topic once, and no
ledger is left with a flush's intent pending. Even schedules count visits too, and so does every
other odd one (3, 7, 11, ...: a lagging shard rolled back by a failover under the stage's
writes, and records let go of at the memory bound); their sessions invariant holds (every
site-day's visits, bounces, durations, entries and exits equal the rule's:
:func:`pipeline.testing.chaos.close_visits`). ``make simulate`` runs many schedules; ``make test``
runs a bounded few (tests/integration/test_faults.py).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.ledger import read_ledger
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.boundaries import (
    Boundaries,
    draw_boundaries,
    lag_then_failover,
    ledger_drill,
    mongos_keys,
    paused_lease_drill,
)
from pipeline.testing.chaos import ChaosReport, run_chaos
from pipeline.testing.kinds_truth import (
    OtherKinds,
    audit_other_kinds,
    generate_other_kinds,
    produce_other_kinds,
)
from pipeline.testing.mongofault import FaultRates, MongoFaultProxy

#: The rates a schedule draws from (0 included: some schedules meet a fault, others not).
RIVAL_INSERT_RATES = (0.0, 0.1, 0.3, 0.5)
LOST_REPLY_RATES = (0.0, 0.05, 0.15)
PARTIAL_BULK_RATES = (0.0, 0.03, 0.1)
SLOW_RATES = (0.0, 0.0, 0.01)
#: The memory bound of odd schedules: small enough that the pages' reader lets go of records
#: (pipeline/worker/letgo.py) and reads them again while workers are killed and the store lies.
LET_GO_BOUND = 300


@dataclass
class ScheduleReport:
    """One schedule: what it injected, what the workers went through, and what came out wrong."""

    seed: int
    rates: FaultRates
    chaos: ChaosReport
    boundaries: Boundaries | None = None
    #: Store answers the proxy played, by fault.
    injected: Counter[str] = field(default_factory=Counter)
    mismatches: list[str] = field(default_factory=list)

    @property
    def faults(self) -> Counter[str]:
        """Every fault of the schedule, by kind (the proxy's and the drill's)."""
        out = Counter(self.injected)
        out["kill -9"] += self.chaos.kills
        out["crash at a commit point"] += self.chaos.fault_exits
        out["fenced exit"] += self.chaos.fenced_exits
        return +out


def draw_rates(seed: int) -> FaultRates:
    """The proxy's rates of schedule ``seed`` (pure)."""
    rng = random.Random(f"rates-{seed}")
    return FaultRates(
        rival_insert=rng.choice(RIVAL_INSERT_RATES),
        lost_reply=rng.choice(LOST_REPLY_RATES),
        partial_bulk=rng.choice(PARTIAL_BULK_RATES),
        slow=rng.choice(SLOW_RATES),
    )


def run_schedule(
    settings: Settings,
    seed: int,
    events: int = 6_000,
    duration: float = 12.0,
    say: Callable[[str], None] = lambda s: None,
    other_events: int = 2_000,
    boundaries: bool = True,
    visits: bool | None = None,
) -> ScheduleReport:
    """One schedule on ``settings`` (fresh topics, group and database expected; the store's own URL).

    Hits are produced at a pace during the chaos drill; impressions, relations and listens
    (``other_events`` of each, keyless) are waiting in their topics when it starts, so the
    same workers count every kind through the same faults; the drill ends once the group has
    counted every topic, then every kind is audited.
    """
    upstream = settings.mongo_url or ""
    if seed % 2 == 1:  # the pages' reader lets go of records and reads them again through the faults
        settings = settings.with_(max_pending_keys=LET_GO_BOUND)
    if (seed % 2 == 0 or seed % 4 == 3) if visits is None else visits:  # the visits stage too
        settings = settings.with_stream(HITS, visits=True)
    rates = draw_rates(seed)
    edges = draw_boundaries(seed) if boundaries else None
    others = generate_other_kinds(seed, other_events)
    if other_events:
        asyncio.run(produce_other_kinds(settings, others))
    proxy = MongoFaultProxy(upstream, rates, seed=seed).start()
    injected: Counter[str] = Counter()
    mismatches: list[str] = []
    try:
        say(
            f"rates: rival insert {rates.rival_insert}, lost answer {rates.lost_reply}, "
            f"bulk cut by a step-down {rates.partial_bulk}, slow {rates.slow}; boundaries: {edges}"
        )
        if settings.max_pending_keys == LET_GO_BOUND:
            injected[f"a memory bound of {LET_GO_BOUND} keys (records let go of)"] += 1
        if settings.of(HITS).visits:
            injected["visits counted (the sessions invariant)"] += 1
        if edges is not None and edges.mongos:
            proxy.mongos = mongos_keys(settings)
            injected["answered as a mongos"] += 1
        if edges is not None and edges.lag is not None:
            lag_then_failover(proxy, *edges.lag, say)
        through = settings.with_(mongo_url=proxy.url)
        topics = [settings.topic(k) for k in ("hits", *others.lines())]
        chaos = run_chaos(through, seed, events, duration, pack=20, say=say, topics=topics)
        mismatches += chaos.mismatches
        if edges is not None and edges.ledger is not None and not mismatches:
            mismatches += ledger_drill(settings, through, chaos.truth, edges.ledger, seed, say, injected)
        if edges is not None and edges.lease:
            mismatches += paused_lease_drill(through, injected)
    finally:
        proxy.stop()
    injected.update(proxy.injected)
    report = ScheduleReport(seed, rates, chaos, edges, injected, mismatches)
    report.mismatches += asyncio.run(_audit(settings, others if other_events else None))
    return report


async def _audit(settings: Settings, others: OtherKinds | None) -> list[str]:
    problems = await _pending_ledgers(settings)
    if others is None:
        return problems
    client = mongo_client(settings.mongo_url or "")
    try:
        return problems + await audit_other_kinds(client[settings.db], settings, others)
    finally:
        await client.close()


async def _pending_ledgers(settings: Settings) -> list[str]:
    """Ledgers still holding a flush's intent once the group has caught up (none may)."""
    client = mongo_client(settings.mongo_url or "")
    try:
        ledgers = await read_ledger(client[settings.db], settings.group_id)
    finally:
        await client.close()
    return [
        f"{d.get('topic')}[{d.get('partition')}] still has a pending flush" for d in ledgers if "pending" in d
    ]
