"""Two workers stopped at the same instant, then a third (the wedge): counting resumes, exactly.

Worker A counts a first stream; worker B joins later (a rebalance: A leads, B follows);
both get SIGTERM (what ``kill %1 %2`` does) or SIGKILL at the same instant; worker C
starts and a second stream is sent. The run *recovers* when C counts both streams
exactly within ``wait`` seconds; otherwise C was never given a partition (*wedged*) or a
counter is wrong (*miscounted*).

On the embedded broker (Tansu 0.6) B's LeaveGroup re-formed the group and A's then left
a ghost leader that every later member waited for (pipeline/worker/rebalance.py,
``track_leadership``): 1 run in 2, before the leader stopped sending its LeaveGroup.
Used by ``tests/integration/test_stop_together.py`` and ``make drill-stop-together``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Literal

from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.command import on_db
from pipeline.testing.audit import audit_hits
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

#: Seconds B gets to say it is ready, and then for the rebalance to settle.
READY_WITHIN = 90.0
SETTLE = 8.0


@dataclass
class StopReport:
    """One run: ``recovered`` (with its seconds), ``wedged`` or ``miscounted`` (with problems)."""

    how: str
    outcome: str
    seconds: float | None = None
    problems: list[str] = field(default_factory=list)
    #: The end of C's log when it did not recover: what the group did.
    log_tail: str = ""


def stop_together(
    settings: Settings, how: Literal["term", "kill"] = "term", wait: float = 180.0, seed: int = 421
) -> StopReport:
    """Run the drill once on ``settings``' topic, group and database."""
    topic = settings.topic("hits")
    first = generate(600, end=time.time(), days=1, seed=seed, bad_share=0.0)
    second = generate(600, end=time.time(), days=1, seed=seed + 1, bad_share=0.0)
    a = WorkerProcess(settings, "a").start()
    b = WorkerProcess(settings, "b")
    try:
        asyncio.run(send_lines(settings, topic, first.lines, 1))
        asyncio.run(wait_caught_up(settings, [topic], timeout=180))
        b.start()  # joins later: a rebalance, A stays the leader
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline and "ready: topics" not in b.log_path.read_text():
            time.sleep(0.5)
        time.sleep(SETTLE)  # the rebalance done: both hold partitions
    finally:
        for w in (a, b):  # the same instant: SIGTERM to the worker, or SIGKILL to its process group
            if w.proc is not None and w.alive():
                with contextlib.suppress(ProcessLookupError):
                    if how == "term":
                        os.kill(w.proc.pid, signal.SIGTERM)
                    else:
                        os.killpg(w.proc.pid, signal.SIGKILL)
        for w in (a, b):  # reaped (a SIGTERMed one within its stop deadline)
            if w.proc is not None:
                w.terminate()
    c = WorkerProcess(settings, "c", restart=True).start()
    started = time.monotonic()
    try:
        asyncio.run(send_lines(settings, topic, second.lines, 1))
        asyncio.run(wait_caught_up(settings, [topic], timeout=wait))
        took = time.monotonic() - started
    except TimeoutError:
        return StopReport(how, "wedged", log_tail=c.log_path.read_text()[-3000:])
    finally:
        c.terminate()
    truth = first.per_minute + second.per_minute
    problems = on_db(settings, lambda db: audit_hits(db, truth, hits_fields(settings.schema)))
    return StopReport(how, "miscounted" if problems else "recovered", round(took, 1), problems[:5])
