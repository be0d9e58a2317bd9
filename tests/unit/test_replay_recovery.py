"""A replay cut short: the wrapper names its dead letter, and the marks cover both runs (pure)."""

from __future__ import annotations

import orjson

from pipeline.core.replay import origin, origin_of, unwrap, wrap
from pipeline.ops.replay_recovery import marks_from_doc, marks_to_doc, merge_marks


def test_the_wrapper_names_its_dead_letter_and_decodes_as_before() -> None:
    record = {"reason": "late", "raw": '{"site": "s"}'}
    sent = wrap("late", record, origin("preagg.dlq", 2, 41))
    assert origin_of(sent) == "preagg.dlq/2/41"
    assert unwrap(sent) == ("late", b'{"site": "s"}')
    binary = wrap("late", {"raw_b64": "AAE="}, origin("d", 0, 0))
    assert origin_of(binary) == "d/0/0" and unwrap(binary) == ("late", b"\x00\x01")
    # Ordinary events, wrappers of earlier versions and broken lines have no origin.
    assert origin_of(b'{"site": "s", "from": "d/0/0"}') is None
    assert origin_of(wrap("late", record)) is None
    assert origin_of(b'{"preagg_replay": "late", "from": 3}') is None
    assert origin_of(b'{"preagg_replay": ') is None


def test_marks_keep_the_lower_offset_so_the_read_back_covers_both_runs() -> None:
    first = {"hits": {0: 10, 1: 7}}
    second = {"hits": {0: 12, 1: 5, 2: 3}, "other.topic": {0: 1}}
    assert merge_marks(first, second) == {"hits": {0: 10, 1: 5, 2: 3}, "other.topic": {0: 1}}
    assert merge_marks({}, first) == first and merge_marks(first, {}) == first
    doc = orjson.loads(orjson.dumps(marks_to_doc(second)))  # topic names with dots survive MongoDB
    assert marks_from_doc(doc) == second
