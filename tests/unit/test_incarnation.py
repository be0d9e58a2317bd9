"""Is the partition Kafka serves the one the ledger describes? The verdicts (no servers)."""

from __future__ import annotations

from pipeline.core.envelope import unpack
from pipeline.core.incarnation import Fingerprint, Probe, digest, judge

LAST = Fingerprint(41, 1_700_000_000_123, digest([b'{"a":1}', b'{"a":2}']))


def test_digest_is_the_same_from_lines_and_from_the_packed_value() -> None:
    assert digest(list(unpack(b'{"a":1}\n{"a":2}\n'))) == LAST.digest
    assert Fingerprint.from_doc(LAST.as_doc()) == LAST
    assert Fingerprint.from_doc(None) is None and Fingerprint.from_doc({"offset": 1}) is None


def test_the_same_log_passes() -> None:
    probe = Probe((41, LAST.ts, LAST.digest), 0, 60)
    assert judge(42, LAST, probe).outcome == "same"
    assert judge(None, None, None).outcome == "same"


def test_a_shorter_log_than_the_ledger_counted_diverged() -> None:
    v = judge(42, LAST, Probe(None, 0, 17))
    assert v.outcome == "diverged" and "ends at offset 17" in v.reason
    # without a fingerprint (older ledgers) the end of the log still tells
    assert judge(42, None, Probe(None, 0, 17)).outcome == "diverged"


def test_another_record_at_the_last_counted_offset_diverged() -> None:
    assert judge(42, LAST, Probe((41, LAST.ts + 5, LAST.digest), 0, 60)).outcome == "diverged"
    assert judge(42, LAST, Probe((41, LAST.ts, "0" * 16), 0, 60)).outcome == "diverged"


def test_what_cannot_be_checked_is_said_not_guessed() -> None:
    assert judge(42, LAST, Probe(None, 50, 60)).outcome == "unverifiable"  # retention
    assert judge(42, LAST, Probe((45, 1, "x"), 0, 60)).outcome == "unverifiable"  # a hole at 41
    assert judge(42, None, Probe((41, 1, "x"), 0, 60)).outcome == "unverifiable"  # older ledger
    assert judge(0, None, Probe(None, 0, 0)).outcome == "same"  # nothing counted yet
    assert judge(42, LAST, None).outcome == "unverifiable"


def test_a_gap_kafka_made_is_accepted_a_gap_with_records_in_it_resumes_from_mongodb() -> None:
    """The old rule restarted on any gap, and a gap Kafka made (transaction markers) came back forever."""
    import asyncio
    from typing import Any

    from pipeline.worker.guard import LedgerGuard

    class FakeProbe:
        def __init__(self, first: int | None, start: int = 0) -> None:
            self.first, self.start = first, start

        async def look(self, topic: str, partition: int, offset: int) -> Probe:
            return Probe(None if self.first is None else (self.first, 1, "d"), self.start, 100)

    resumed: list[str] = []

    class Guard(LedgerGuard):
        async def resume_from_mongo(self, reason: str) -> None:
            resumed.append(reason)

    class FakeSink:
        async def note_lost(self, tp: Any, stored: int, start: int) -> None:
            pass

    def guard(probe: Any) -> Guard:
        return Guard(None, FakeSink(), probe, "w")  # type: ignore[arg-type]

    asyncio.run(guard(FakeProbe(first=45)).on_gap(("t", 0), 42, 45))  # 42..44: markers
    asyncio.run(guard(FakeProbe(first=None, start=45)).on_gap(("t", 0), 42, 45))  # retention
    assert resumed == []
    asyncio.run(guard(FakeProbe(first=42)).on_gap(("t", 0), 42, 45))  # records 42..44 exist
    assert len(resumed) == 1 and "holds records in between" in resumed[0]


def test_an_unknown_timestamp_leaves_the_digest_to_decide() -> None:
    no_ts = Fingerprint(41, 0, LAST.digest)
    assert judge(42, no_ts, Probe((41, -1, LAST.digest), 0, 60)).outcome == "same"
    assert judge(42, no_ts, Probe((41, -1, "other"), 0, 60)).outcome == "diverged"
