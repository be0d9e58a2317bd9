"""The loop that seals top pages and folds visitor registers once a period settles (pure, a fake clock)."""

from __future__ import annotations

import asyncio

from pymongo.errors import WriteConcernError

from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.sites.caps import Period
from pipeline.kinds.hits.sites.fold import VisitorFolder
from pipeline.kinds.hits.sites.settle import HELD_EVERY, MAX_TRIES, Settler


def test_a_live_period_is_never_folded_until_it_settles() -> None:
    now = [0.0]
    folder = VisitorFolder(None, hits_fields(), settle=3.0, clock=lambda: now[0])  # type: ignore[arg-type]
    for second in range(600):  # written every second for ten minutes: never due
        now[0] = float(second)
        folder.touched([("live.test", 1)], [("live.test", 1)])
        assert folder.due() == [], second
    now[0] += 3.0
    assert folder.due() == [("live.test", "d", 1), ("live.test", "m", 1)]


def test_a_period_still_moving_is_tried_again_a_bounded_number_of_times() -> None:
    now = [0.0]
    tried: list[Period] = []

    async def action(period: Period) -> str:
        tried.append(period)
        if len(tried) == 1:
            raise WriteConcernError("a store error: logged, tried again")
        return "moving"

    settler = Settler(action, "testing", 1.0, 0.0, clock=lambda: now[0])
    settler.touched([("a.test", 7)], [])
    for _ in range(MAX_TRIES + 5):
        now[0] += 2.0
        asyncio.run(settler.run_once())
    assert len(tried) == MAX_TRIES and settler.counts["gave_up"] == 1 and settler.due() == []
    assert settler.counts["moving"] == MAX_TRIES


def test_a_final_outcome_ends_the_wait_until_the_next_write() -> None:
    now = [0.0]
    outcomes = iter(["folded", "already"])

    async def action(period: Period) -> str:
        return next(outcomes)

    settler = Settler(action, "testing", 1.0, 0.0, clock=lambda: now[0])
    settler.touched([("a.test", 7)], [])
    now[0] = 5.0
    asyncio.run(settler.run_once())
    assert settler.due() == [] and settler.counts["folded"] == 1
    settler.touched([("a.test", 7)], [])  # written again: due again once settled
    now[0] = 10.0
    asyncio.run(settler.run_once())
    assert settler.counts["already"] == 1


def test_outcomes_are_one_counter_by_outcome() -> None:
    from pipeline.kinds.hits.sites.fold import fold_metrics

    folder = VisitorFolder(None, hits_fields())  # type: ignore[arg-type]
    folder.counts.update({"folded": 3, "moving": 1})
    (metric,) = fold_metrics(folder)
    assert metric.name == "preagg_visitor_folds"
    assert {s.labels["outcome"]: s.value for s in metric.samples} == {"folded": 3, "moving": 1}


def test_while_a_commit_is_written_a_period_waits_for_it_or_for_the_held_interval() -> None:
    """Held (the stream writing a commit), a settled period waits: the next commit of a backlog
    writes its documents again. It is due once the commit is done, or every HELD_EVERY
    seconds of commits that never stop."""
    now = [0.0]

    async def action(period: Period) -> str:
        return "done"

    settler = Settler(action, "testing", 3.0, 60.0, clock=lambda: now[0])
    settler.touched([("a.test", 1)], [])
    settler.held = True
    now[0] = 100.0  # settled, and open for more than a minute: held all the same
    assert settler.due() == []
    settler.held = False
    assert settler.due() == [("a.test", "d", 1)]
    settler.held = True
    now[0] = HELD_EVERY + 1.0  # commits without end: due every HELD_EVERY seconds
    assert settler.due() == [("a.test", "d", 1)]


def test_a_run_under_way_stops_acting_once_the_stream_becomes_busy() -> None:
    """Counting 47,000 page documents after one commit of a backlog ran on while the next commit
    wrote them again; the periods not reached yet wait until the stream is no longer busy."""
    now = [0.0]
    done: list[Period] = []

    async def action(period: Period) -> str:
        done.append(period)
        settler.held = True  # the next commit started while this period was being acted on
        return "done"

    settler = Settler(action, "testing", 3.0, 60.0, clock=lambda: now[0])
    settler.touched([("a.test", 1), ("b.test", 1)], [])
    now[0] = 10.0
    asyncio.run(settler.run_once())
    assert done == [("a.test", "d", 1)]
    settler.held = False
    asyncio.run(settler.run_once())
    assert done == [("a.test", "d", 1), ("b.test", "d", 1)]
