"""What waits to be counted (pure): messages per partition, the rate, stalled, the CLI line."""

from __future__ import annotations

from pipeline.ops.pending import STALLED_AFTER, Sample, pending, positions


def test_nothing_waiting_is_complete_and_says_nothing() -> None:
    now = Sample(100.0, {0: 10, 1: 5}, {0: 10, 1: 5}, last_flush=99.0)
    p = pending("hits", now)
    assert p.messages == 0 and p.as_json(100.0)["complete"] is True and p.note() == ""


def test_waiting_messages_with_a_rate_give_an_estimate() -> None:
    before = Sample(100.0, {0: 100, 1: 100}, {0: 0, 1: 50}, last_flush=99.0)
    now = Sample(102.0, {0: 100, 1: 100}, {0: 40, 1: 60}, last_flush=101.5)
    p = pending("hits", now, before)
    assert (p.messages, p.partitions) == (100, 2)
    assert p.seconds == 100 / 25  # 50 messages counted in 2 s
    assert not p.stalled
    j = p.as_json(103.0)
    assert j["complete"] is False and j["seconds"] == 4.0 and j["checked"] == 1.0
    assert p.note() == (
        "not complete yet: 100 messages of hits on 2 partitions still to be counted, about 4 s more"
    )


def test_a_backlog_without_a_flush_for_a_minute_is_stalled() -> None:
    now = Sample(1000.0, {0: 10}, {0: 2}, last_flush=1000.0 - STALLED_AFTER - 1)
    p = pending("hits", now, now)
    assert p.stalled and p.seconds is None
    assert "no worker is counting them (last flush 61 s ago; see preagg status)" in p.note()
    never = pending("hits", Sample(5.0, {0: 1}, {}))
    assert never.stalled and "last flush never" in never.note()


def test_positions_take_the_ledger_or_kafka_whichever_is_further() -> None:
    ledger = [{"partition": 0, "next": 7}, {"partition": 1, "next": 3}]
    assert positions(ledger, {0: 5, 1: 9, 2: None}) == {0: 7, 1: 9, 2: 0}
