"""A site rollup's hour sketch when the rollups run ahead of the pages (pipeline/kinds/hits/
families.py). The two flushers count what they wrote with budgets of their own, and apart (the
sites' small windows often, the pages' one large window): when the sites' flusher listed the
hour's register document and the pages' flusher wrote it only by its own count, an hour whose
sites' count passed 128 while the pages' stayed under counted 99 of 120 visitors. Each sketch
is now decided and written by one family: the hours by the pages'."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.core.uniques import Budget, Estimate, estimate
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.families import PAGES, SITES, Family
from pipeline.kinds.hits.layout import hits_fields, register_fields, register_id
from pipeline.kinds.hits.registers import stored_registers

T = 2_000_000_000 - 3600  # one hour of one day, a whole hour before the clock
FIELDS = hits_fields()


def window(visitors: range) -> list[bytes]:
    return [
        json.dumps({"site": "s", "page": "/", "ts": T + 10, "visitor": f"u-{i}"}).encode() for i in visitors
    ]


def aggregate(family: Family, budget: Budget) -> HitCounts:
    return HitCounts(
        HitDecoder(1000, 300, clock=lambda: 2e9),
        FIELDS,
        visitor_keys=lambda o: b"k" * 32,
        visitor_budget=budget,
        family=family,
    )


def planned(family: Family, budget: Budget, windows: list[list[bytes]]) -> list[DocUpdate]:
    agg = aggregate(family, budget)
    for raw in (r for w in windows for r in w):
        agg.ingest(raw, 0)
    plan = agg.plan()
    for u in plan:
        u.sources = (("hits", 0),)
    return plan


def apply(doc: dict[str, Any], upd: DocUpdate) -> None:
    """The update's sketch operators on a plain document (``$max``, ``$addToSet``, the
    read-modify-write's ``$set``), as the store applies them."""

    def at(path: str) -> tuple[dict[str, Any], str]:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        return node, last

    for path, value in upd.max.items():
        node, last = at(path)
        node[last] = max(node.get(last, value), value)
    for path, values in upd.add_to_set.items():
        node, last = at(path)
        node[last] = [*node.get(last, []), *(v for v in values if v not in node.get(last, []))]
    if upd.compute is not None:
        for path, value in upd.compute(doc or None).items():
            node, last = at(path)
            node[last] = value


@pytest.mark.parametrize("first_n, second_n", [(100, 120), (150, 300)])
def test_a_site_hour_is_decided_and_written_by_one_family(first_n: int, second_n: int) -> None:
    """Sites: a window of visitors 0-99, then one of 0-119. Pages: one window of both, 120
    distinct. The rollup's hour, as both flushers leave it, counts the 120 exactly (and 300,
    past the explicit form, within HyperLogLog's error); the sites' flusher writes no hour
    sketch."""
    first, second = window(range(first_n)), window(range(second_n))
    sites_budget, rollup, stored = Budget(), {}, {}
    daily = FIELDS.rollups.daily.collection
    for w in ([first], [second]):
        for u in planned(SITES, sites_budget, w):
            assert not any(p.startswith(FIELDS.daily.hourly_visitors) for p in [*u.add_to_set, *u.max])
            if u.collection == daily:
                apply(rollup, u)
                rollup_id = u.id
    assert rollup[FIELDS.daily.visitors]  # the day's sketch is the sites' flusher's
    for u in planned(PAGES, Budget(), [first, second]):
        if u.collection == daily:
            apply(rollup, u)
        elif u.collection == register_fields().collection:
            apply(stored.setdefault(u.id, {}), u)
    hours = rollup[FIELDS.daily.hourly_visitors]
    assert len(hours) == 1
    ((h, hour),) = hours.items()
    path = f"{FIELDS.daily.hourly_visitors}.{h}"
    ids = [register_id(daily, rollup_id, path, w) for w in hour.get("w", [])]
    assert all(i in stored for i in ids)  # every register document the hour lists is written
    got = estimate([hour], [stored_registers(stored[i], register_fields()) for i in ids])
    if second_n <= 128:
        assert got == Estimate(second_n, True)
    else:
        assert ids and abs(got.value - second_n) <= 0.02 * second_n


def test_the_pages_flusher_writes_a_site_day_s_registers_from_partition_64_whatever_it_counted() -> None:
    """From partition 64 a site day's registers are in a document the pages' flusher writes,
    listed by the sites' flusher when its count says: the pages' flusher writes them always."""
    agg = aggregate(PAGES, Budget())
    for raw in window(range(3)):
        agg.ingest(raw, 70)
    plan = agg.plan()
    rf = register_fields()
    regs = [u.id for u in plan if u.collection == rf.collection]
    assert any(i.startswith(f"{FIELDS.rollups.daily.collection}|{FIELDS.daily.visitors}|") for i in regs)
