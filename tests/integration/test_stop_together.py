"""Two workers stopped at the same instant (SIGTERM, then kill -9), then a third: it counts, exactly.

The wedge: on the embedded broker, a follower's LeaveGroup then the leader's left
the group waiting for a ghost leader, and the new worker was never given a partition (1
run in 2). The drill runs against the same embedded broker the README uses.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import pytest

from pipeline.kafka.group import join_as, leave_as
from pipeline.kafka.options import KafkaConnection
from pipeline.kinds import stream_topics
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.testing.stop_together import stop_together
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import audit_traffic, produce

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("how", ["term", "term", "kill"], ids=["sigterm-1", "sigterm-2", "kill-9"])
def test_two_workers_stopped_at_once_then_a_third_counts_exactly(
    settings: Settings, how: Literal["term", "kill"]
) -> None:
    report = stop_together(settings, how, wait=240.0)
    assert report.outcome == "recovered", (report.outcome, report.problems, report.log_tail)


def test_a_ghost_leader_left_by_another_client_is_cleared_by_the_waiting_worker(settings: Settings) -> None:
    """A client that joins and leaves before it syncs leaves the embedded broker's group waiting
    for it as leader; the worker the group never lets start rejoins as that ghost once, and counts."""
    conn = KafkaConnection.of(settings)
    topics = stream_topics(settings)
    timeout_ms = int(settings.session_timeout * 1000)

    async def make_ghost() -> str:
        member = await join_as(conn, settings.group_id, "", "faust", topics, timeout_ms)
        member = await join_as(conn, settings.group_id, member, "faust", topics, timeout_ms)  # the leader
        await leave_as(conn, settings.group_id, member)  # re-forming: the broker keeps it as leader
        return member

    ghost = asyncio.run(make_ghost())
    traffic = generate(800, end=time.time(), days=1, seed=4242, bad_share=0.0)
    asyncio.run(produce(settings, traffic.lines, pack=1))
    worker = WorkerProcess(settings, "waiting", restart=True).start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=240))
    finally:
        worker.terminate()
    log = worker.log_path.read_text()
    assert f"the group waits for leader {ghost}, who is not a member" in log, log[-3000:]
    problems, _ = audit_traffic(settings, traffic)
    assert not problems, problems[:5]
