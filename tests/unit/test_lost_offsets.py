"""Kafka's view of a partition against its ledger, at assignment and at a gap (no servers):
a ledger behind Kafka's committed offset resumes from MongoDB at once; offsets deleted before
they were counted are said loudly, once, and recorded for status."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pipeline.core.incarnation import Probe
from pipeline.worker import guard as guard_module
from pipeline.worker.guard import LedgerGuard


class FakeSink:
    group = "g"

    def __init__(self, positions: dict[tuple[str, int], int | None]) -> None:
        self.positions = positions
        self.noted: list[tuple[tuple[str, int], int, int]] = []

    async def load_positions(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        return {tp: self.positions.get(tp) for tp in tps}

    async def note_lost(self, tp: tuple[str, int], stored: int, start: int) -> None:
        self.noted.append((tp, stored, start))


class FakeProbe:
    conn = None

    def __init__(self, start: int) -> None:
        self.start = start

    async def look(self, topic: str, partition: int, offset: int) -> Probe:
        return Probe(None, self.start, 100)


class Guard(LedgerGuard):
    def __init__(self, sink: FakeSink, probe: FakeProbe) -> None:
        super().__init__(None, sink, probe, "w")  # type: ignore[arg-type]
        self.resumed: list[str] = []

    async def resume_from_mongo(self, reason: str) -> None:
        self.resumed.append(reason)


def kafka(monkeypatch: pytest.MonkeyPatch, view: dict[tuple[str, int], tuple[int | None, int]]) -> None:
    async def group_positions(conn: Any, group: str, tps: list[tuple[str, int]]) -> Any:
        return {tp: view[tp] for tp in tps}

    monkeypatch.setattr(guard_module, "group_positions", group_positions)


def test_a_ledger_behind_kafkas_committed_offset_resumes_at_assignment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = FakeSink({("t", 0): 10, ("t", 1): 50, ("t", 2): None})
    kafka(monkeypatch, {("t", 0): (40, 0), ("t", 1): (50, 0)})
    g = Guard(sink, FakeProbe(0))
    asyncio.run(g.at_assignment([("t", 0), ("t", 1), ("t", 2)]))
    assert len(g.resumed) == 1 and "t[0] Kafka 40, MongoDB 10" in g.resumed[0]
    assert "t[1]" not in g.resumed[0]  # at the ledger: nothing to do
    assert sink.noted == []


def test_nothing_to_do_when_kafka_is_at_or_behind_the_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = FakeSink({("t", 0): 10})
    for committed in (None, 3, 10):
        kafka(monkeypatch, {("t", 0): (committed, 0)})
        g = Guard(sink, FakeProbe(0))
        asyncio.run(g.at_assignment([("t", 0)]))
        assert g.resumed == []


def test_offsets_deleted_before_they_were_counted_are_said_once_and_recorded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention moved the log's start past the ledger: a WARNING naming the offsets, the metric, the
    ledger's mark; Kafka's committed offset at the new start is not "ahead" (no restart loop)."""
    sink = FakeSink({("t", 0): 10})
    kafka(monkeypatch, {("t", 0): (25, 25)})
    g = Guard(sink, FakeProbe(25))
    with caplog.at_level(logging.WARNING, logger="preagg.worker"):
        asyncio.run(g.at_assignment([("t", 0)]))
        asyncio.run(g.on_gap(("t", 0), 10, 25))  # the first record after it: the same loss
    assert g.resumed == []
    assert sink.noted == [(("t", 0), 10, 25)]
    assert g.offsets_lost == {"t": 15}
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "offsets 10..24 were deleted from Kafka" in lines[0]
    (metric,) = list(guard_module.lost_metric(g.offsets_lost).samples)
    assert (metric.name, metric.labels, metric.value) == ("preagg_offsets_lost_total", {"topic": "t"}, 15.0)
