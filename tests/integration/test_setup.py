"""``preagg setup`` on the embedded services: creates everything once, changes nothing the second time;
without it a worker (and a producer) stops at once with one line naming what is missing."""

from __future__ import annotations

import pytest

from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

from .helpers import run_cli

pytestmark = pytest.mark.integration


def test_setup_creates_everything_once_and_workers_refuse_to_run_without_it(settings: Settings) -> None:
    manual = settings.with_(auto_setup=False)
    check = run_cli(manual, "setup", "--check")
    assert check.returncode == 1 and f"missing: topic {settings.topic('hits')}" in check.stdout

    w = WorkerProcess(manual, "not-set-up").start()
    assert w.proc is not None and w.proc.wait(60) == 2
    w.terminate()
    lines = [x for x in w.log_path.read_text().splitlines() if "not set up" in x]
    assert len(lines) == 1 and "run `preagg setup`" in lines[0], w.log_path.read_text()[-2000:]
    assert settings.topic("hits") in lines[0] and settings.deadletter_topic in lines[0]

    produce = run_cli(manual, "produce", "hits", "-")
    assert produce.returncode == 2 and "run `preagg setup`" in produce.stderr

    first = run_cli(manual, "setup")
    assert first.returncode == 0, first.stderr
    for what in (
        f"created topic {settings.topic('hits')}",
        f"created topic {settings.deadletter_topic}",
        "created collection hits_daily",
        "created collection preagg_offsets",
        "created index hits_daily.site_page_date",
    ):
        assert what in first.stdout, first.stdout
    second = run_cli(manual, "setup")
    assert second.returncode == 0 and second.stdout.strip() == "already set up: nothing to change", (
        second.stdout
    )
    assert run_cli(manual, "setup", "--check").returncode == 0
