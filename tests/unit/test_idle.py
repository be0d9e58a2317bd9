"""A worker with no partition while messages wait uncounted is flagged, then restarts (pure, fake clock)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from pipeline.worker.idle import IDLE_AFTER, RESTART_AFTER, IdleWatch, Waiting, verdict


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(assigned: list[int], waiting: Waiting, restarts: list[str], clock: Clock) -> IdleWatch:
    async def look() -> Waiting:
        return waiting

    return IdleWatch(lambda: assigned[0], look, lambda: "member m1 generation 7", restarts.append, clock)


def test_an_idle_worker_in_a_quiet_group_is_never_flagged() -> None:
    assert verdict(0, 10 * IDLE_AFTER, Waiting({})) is None
    assert verdict(2, 10 * IDLE_AFTER, Waiting({"hits[0]": 5})) is None
    assert verdict(0, IDLE_AFTER / 2, Waiting({"hits[0]": 5})) is None


def test_flagged_after_the_idle_bound_then_restarted_after_the_restart_bound() -> None:
    clock, restarts, assigned = Clock(), [], [0]
    w = watch(assigned, Waiting({"hits[0]": 120, "hits[1]": 3}), restarts, clock)
    asyncio.run(w.check())
    assert w.problem is None
    clock.now = IDLE_AFTER
    asyncio.run(w.check())
    assert w.problem is not None and "hits[0] (120 waiting)" in w.problem and not restarts
    clock.now = IDLE_AFTER + RESTART_AFTER
    asyncio.run(w.check())
    assert len(restarts) == 1 and "new member" in restarts[0]


def test_a_partition_assigned_clears_the_problem() -> None:
    clock, restarts, assigned = Clock(), [], [0]
    w = watch(assigned, Waiting({"hits[0]": 1}), restarts, clock)
    asyncio.run(w.check())
    clock.now = IDLE_AFTER
    asyncio.run(w.check())
    assert w.problem is not None
    assigned[0] = 1
    clock.now += 1
    asyncio.run(w.check())
    assert w.problem is None and not restarts


def test_a_worker_the_group_never_starts_says_so_until_it_starts(caplog: pytest.LogCaptureFixture) -> None:
    from pipeline.worker import start_watch as app

    app.STARTED.clear()
    with caplog.at_level(logging.WARNING, logger="preagg.worker"):
        thread = app.watch_start(0.05, lambda: "member m-1, generation 3; group g: state Stable, 1 member(s)")
        deadline = time.monotonic() + 10
        while "not ready after" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        app.STARTED.set()
        thread.join(5)
    assert "not ready after" in caplog.text and "preagg status" in caplog.text
    assert "member m-1, generation 3; group g" in caplog.text  # who it is and what the broker says
    assert not thread.is_alive()


def test_a_failing_look_at_the_group_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    from pipeline.worker import start_watch as app

    def broken() -> str:
        raise OSError("broker down")

    app.STARTED.clear()
    with caplog.at_level(logging.WARNING, logger="preagg.worker"):
        thread = app.watch_start(0.05, broken)
        deadline = time.monotonic() + 10
        while "not ready after" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        app.STARTED.set()
        thread.join(5)
    assert "group not described (OSError: broker down)" in caplog.text
