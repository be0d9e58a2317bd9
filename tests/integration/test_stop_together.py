"""Two workers stopped at the same instant (SIGTERM, then kill -9), then a third: it counts, exactly.

Issue 42's wedge: on the embedded broker, a follower's LeaveGroup then the leader's left
the group waiting for a ghost leader, and the new worker was never given a partition (1
run in 2). The drill runs against the same embedded broker the README uses.
"""

from __future__ import annotations

from typing import Literal

import pytest

from pipeline.settings import Settings
from pipeline.testing.stop_together import stop_together

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("how", ["term", "term", "kill"], ids=["sigterm-1", "sigterm-2", "kill-9"])
def test_two_workers_stopped_at_once_then_a_third_counts_exactly(
    settings: Settings, how: Literal["term", "kill"]
) -> None:
    report = stop_together(settings, how, wait=240.0)
    assert report.outcome == "recovered", (report.outcome, report.problems, report.log_tail)
