"""A worker's log is its own: no Faust tables or INFO, and JSON lines on request.

Started as the README starts it, counted a few events, stopped: its log holds preagg's
lines (ready, stopped; a progress line a minute, not a line per flush), none of Faust's or
aiokafka's INFO (subscriptions, assignment tables, group joins); with
``PREAGG_LOG_FORMAT=json`` every line is a JSON object with ``t``, ``level``, ``logger``
and ``msg``.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from pipeline.settings import Settings
from pipeline.testing.traffic import generate

from .helpers import produce, run_worker_to_end

pytestmark = pytest.mark.integration

#: What Faust and aiokafka print at INFO: their tables and group chatter.
NOISE = ("┌", "+-", "Subscribed to topic", "Joined group", "(Re-)joining group", "[^", "Elected group")


def worker_log(settings: Settings, name: str) -> str:
    return (settings.home / "logs" / f"{name}.log").read_text()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_worker_logs_its_own_lines_only(settings: Settings, fmt: str) -> None:
    settings = settings.with_(log_format=fmt, log_flushes=False)  # the default: no line per flush
    traffic = generate(50, end=time.time(), seed=42, bad_share=0.0)
    asyncio.run(produce(settings, traffic.lines, pack=10))
    run_worker_to_end(settings, name=f"quiet-{fmt}")
    text = worker_log(settings, f"quiet-{fmt}")
    lines = [line for line in text.splitlines() if line.strip()]
    assert not [line for line in lines if any(n in line for n in NOISE)], text[-3000:]
    assert any("ready: topics" in line for line in lines), text[-3000:]
    assert not [line for line in lines if "flushed hits:" in line], text[-3000:]  # a progress line a minute
    if fmt == "json":
        records = [json.loads(line) for line in lines]
        assert all({"t", "level", "logger", "msg"} <= set(r) for r in records)
        assert any(r["logger"] == "preagg.worker" and "ready" in r["msg"] for r in records)
