"""Marks carry their flush's range: the same flush again is told from another range under the same
sequence, and a ledger is rebuilt from the highest mark (pure, no servers)."""

from __future__ import annotations

from pipeline.core.marks import (
    MARKS,
    RANGE_BITS,
    ahead_sources,
    floor_of,
    mark_key,
    mark_value,
    missing_sources,
    parse_mark_key,
    range_end_of,
    sequence_of,
)
from pipeline.core.updates import DocUpdate
from pipeline.ops.ledger_rebuild import MarksSeen, RebuildRow, kafka_positions, plan_row, scan_marks

TP = ("hits", 0)


def doc(value: int) -> dict[str, object]:
    return {"_id": "d", MARKS: {mark_key(*TP): value}}


def update() -> DocUpdate:
    return DocUpdate("c", "d", {}, {"n": 1}, sources=(TP,))


def test_a_mark_holds_its_sequence_and_the_low_bits_of_its_range_end() -> None:
    value = mark_value(57, 1_834)
    assert (sequence_of(value), range_end_of(value), floor_of(value)) == (57, 1_834, 57 << RANGE_BITS)
    assert range_end_of(mark_value(3, (1 << RANGE_BITS) + 5)) == 5
    # A mark written before marks carried their range is a plain sequence.
    assert (sequence_of(57), range_end_of(57), floor_of(57)) == (57, None, 57)


def test_the_same_flush_is_applied_another_range_under_its_sequence_is_ahead() -> None:
    ours = {TP: mark_value(5, 100)}
    assert missing_sources(update(), doc(mark_value(4, 90)), ours) == (TP,)  # an older flush's
    assert missing_sources(update(), None, ours) == (TP,)
    assert missing_sources(update(), doc(4), ours) == (TP,)  # a plain older mark
    assert ahead_sources(update(), doc(mark_value(5, 100)), ours) == ()  # this very flush: applied
    assert missing_sources(update(), doc(mark_value(5, 100)), ours) == ()
    assert ahead_sources(update(), doc(mark_value(5, 120)), ours) == ((TP, mark_value(5, 120)),)
    assert ahead_sources(update(), doc(mark_value(9, 300)), ours) == ((TP, mark_value(9, 300)),)


def test_mark_names_parse_back() -> None:
    assert parse_mark_key(mark_key("a.b", 3)) == ("a.b", 3, 0)
    assert parse_mark_key(mark_key("hits", 12, 2)) == ("hits", 12, 2)
    assert parse_mark_key("nonsense") is None


def test_a_ledger_is_rebuilt_from_the_highest_mark_near_kafkas_committed_offset() -> None:
    seen = scan_marks(
        [{mark_key(*TP): mark_value(7, 700)}, {mark_key(*TP): mark_value(9, 950)}, {"x|y": 1}], "hits"
    )
    assert set(seen) == {TP} and seen[TP].highest == mark_value(9, 950)
    row = plan_row(TP, seen[TP], None, 940, 2_000)  # the ledger deleted: Kafka's committed offset
    assert (row.new_next, row.new_seq, row.refused) == (950, 9, None)
    row = plan_row(TP, seen[TP], {"next": 700, "seq": 7}, None, 2_000)  # restored older, no commit
    assert (row.new_next, row.new_seq) == (950, 9)
    far = (1 << RANGE_BITS) * 3 + 950  # the end's high bits come from the committed offset
    assert plan_row(TP, seen[TP], None, far - 10, far + 5).new_next == far


def test_what_the_marks_cannot_decide_is_refused() -> None:
    twice = MarksSeen()
    for value in (mark_value(4, 400), mark_value(4, 420)):
        twice.add(value)
    assert "two ranges under flush 4" in (plan_row(TP, twice, None, 400, 1_000).refused or "")
    plain = MarksSeen()
    plain.add(12)
    assert "before marks carried" in (plan_row(TP, plain, None, 400, 1_000).refused or "")
    one = MarksSeen()
    one.add(mark_value(4, 400))
    assert "outside Kafka's log" in (plan_row(TP, one, None, 400, 100).refused or "")
    assert "neither Kafka nor the ledger" in (plan_row(TP, one, None, None, 1_000).refused or "")


def test_a_ledger_that_gave_out_every_mark_is_left_alone() -> None:
    """A partition being counted (its ledger's sequence at or above every mark, not held) is not
    rebuilt: its worker may be writing a flush that moving the ledger would count again."""
    seen = MarksSeen()
    seen.add(mark_value(9, 950))
    live = {"next": 950, "seq": 10, "pending": {"flush": "f", "end": 990, "ranged": True}}
    row = plan_row(TP, seen, live, 940, 2_000)
    assert (row.new_next, row.refused) == (None, None) and "every flush" in (row.settled or "")
    assert "unchanged" in row.text()
    held = {**live, "behind": {"reason": "held"}, "seq": 9}
    assert plan_row(TP, seen, held, 940, 2_000).new_next == 950


def test_a_flush_cut_short_past_the_highest_mark_is_refused() -> None:
    """A held ledger's cut-short flush wrote some documents of a range past the highest flush
    (its sequence below it, given out again by a ledger restored older): rebuilt to the highest
    flush's end, those documents would count that range again."""
    seen = MarksSeen()
    for value in (mark_value(9, 950), mark_value(6, 1_100)):
        seen.add(value)
    cut = {"next": 600, "seq": 6, "behind": {}, "pending": {"flush": "f", "end": 1_100, "ranged": True}}
    assert "cut short" in (plan_row(TP, seen, cut, 940, 2_000).refused or "")
    unwritten = MarksSeen()
    unwritten.add(mark_value(9, 950))
    assert plan_row(TP, unwritten, cut, 940, 2_000).new_next == 950  # it wrote nothing: dropped


def test_kafka_follows_the_lowest_ledger_of_a_rebuilt_partition() -> None:
    def row(topic: str, partition: int, at: int, new: int | None) -> RebuildRow:
        return RebuildRow(topic, partition, at, 1, 1, 1, new, None if new is None else 2)

    rows = [row("hits", 0, 500, 900), row("hits@sites", 0, 700, None), row("hits", 1, 300, None)]
    assert kafka_positions(rows) == {("hits", 0): 700}
