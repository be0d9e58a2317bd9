"""The embedded broker's restart is not a dead end.

As a README reader runs it, in a fresh directory: `preagg services up`, events counted by
a worker, `preagg services down` (which says what it keeps and what it loses), `up` again
(the broker starts empty: it says so and moves the ledgers to the new topics), new events,
a worker: every event counted once, nothing held back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def preagg(home: Path, *args: str, timeout: float = 180) -> str:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")}, "PREAGG_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


def count_with_a_worker(home: Path, want: int) -> None:
    """A worker until the counts reach ``want`` (status: events), then SIGTERM."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREAGG_")}, "PREAGG_HOME": str(home)}
    log = open(home / "worker.log", "ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "worker", "--no-restart"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            status = json.loads(preagg(home, "status", "--interval", "0", "--json"))
            if status["events"] >= want and status["lag"] == 0:
                break
            time.sleep(1)
        assert status["events"] == want and status["problems"] == [], status
    finally:
        worker.terminate()
        worker.wait(60)
        log.close()


def test_services_down_and_up_again_move_the_ledgers_to_the_new_topics(tmp_path: Path) -> None:
    home = tmp_path / ".preagg"
    events = tmp_path / "hits.jsonl"
    events.write_text(
        "".join(
            json.dumps({"site": "r.test", "page": "/", "ts": 1_700_000_000 + i}) + "\n" for i in range(30)
        )
    )
    preagg(home, "services", "up")
    try:
        preagg(home, "produce", "hits", str(events))
        count_with_a_worker(home, 30)
        down = preagg(home, "services", "down")
        assert "Kept: the store's documents" in down and "Lost: the broker's topics" in down, down
        up = preagg(home, "services", "up")
        assert "ledgers now start at offset 0 of the new topics" in up, up
        preagg(home, "produce", "hits", str(events))
        count_with_a_worker(home, 60)
        rows = json.loads(
            preagg(
                home,
                "query",
                "hits",
                "--site",
                "r.test",
                "--from",
                "2023-11-14",
                "--to",
                "2023-11-15",
                "--by",
                "day",
                "--json",
            )
        )
        assert sum(r["hits"] for r in rows) == 60
    finally:
        subprocess.run(
            [sys.executable, "-m", "pipeline", "services", "down"],
            env={**os.environ, "PREAGG_HOME": str(home)},
            capture_output=True,
            timeout=60,
        )
