"""The per-user top-tags summary answers exactly as the (user, tag) slots do (pure, no store)."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.ids import Id
from pipeline.core.times import day_text
from pipeline.core.updates import DocUpdate
from pipeline.kinds.listens.aggregate import ListenSketches
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.heard import HeardSpec
from pipeline.kinds.listens.layout import listen_fields, top_fields, top_id
from pipeline.kinds.listens.query import from_slots
from pipeline.kinds.listens.tops import encode_entry, latest, ranked, tag_key, tag_of, window_estimates
from pipeline.testing.stored import after_set

F, T = listen_fields(), top_fields()
START = date(2026, 11, 2)  # a Monday
Store = dict[tuple[str, Any], dict[str, Any]]


def flush(store: Store, events: list[tuple[Id, Id, int, int]]) -> list[DocUpdate]:
    """One window of (user, tag, song, day offset) applied as the sink does: reads, then computes in order."""
    agg = ListenSketches(ListenDecoder(10**6, 300, clock=lambda: 2e9), 12, HeardSpec())
    for user, tag, song, day in events:
        ts = 86400 * (START + timedelta(days=day) - date(1970, 1, 1)).days + 3600
        line = orjson.dumps({"user": user, "tag": tag, "song": song, "ts": ts})
        assert agg.ingest(line) is None
    plan = agg.plan()
    before = {(u.collection, u.id): store.get((u.collection, u.id)) for u in plan}
    for u in plan:
        assert u.compute is not None
        stored = before[(u.collection, u.id)]
        out = u.compute(stored)
        store[(u.collection, u.id)] = after_set(stored if stored is not None else u.set_on_insert, out)
    return plan


def answers(store: Store, user: Id, days: int, today: date) -> tuple[Any, Any]:
    summary = store[(T["collection"], top_id(user))]
    docs = [d for (c, _), d in store.items() if c == F["collection"] and d[F["user"]] == user]
    lo, hi = day_text(today - timedelta(days=days - 1)), day_text(today)
    got = ranked(summary[T["tags"]], days, today)
    return (sorted(got, key=repr) if got is not None else None), sorted(from_slots(docs, lo, hi, F), key=repr)


TAGS = st.sampled_from([1, 2, 3, "rock", "drum.and.bass"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(TAGS, st.integers(0, 400), st.integers(0, 20)), min_size=1, max_size=60),
        min_size=1,
        max_size=4,
    ),
    st.integers(0, 9),
    st.integers(1, 7),
)
def test_the_summary_answers_as_the_slots_do(
    windows: list[list[tuple[Id, int, int]]], ahead: int, days: int
) -> None:
    store: Store = {}
    for window in windows:
        flush(store, [(7, tag, song, day) for tag, song, day in window])
    summary = store[(T["collection"], "i7")]
    last = latest(summary[T["tags"]])
    assert last is not None
    assert last == START + timedelta(days=max(d for w in windows for _, _, d in w))
    today = last + timedelta(days=ahead)
    from_summary, from_docs = answers(store, 7, days, today)
    assert from_summary == from_docs
    # With a limit only the tags that can rank are decoded; ties at the boundary are kept.
    order = lambda r: (-r[1], isinstance(r[0], str), r[0])  # noqa: E731 (top_tags' order)
    full = sorted(ranked(summary[T["tags"]], days, today) or [], key=order)
    for limit in (1, 2, 3):
        assert sorted(ranked(summary[T["tags"]], days, today, limit) or [], key=order)[:limit] == full[:limit]
    # A window ending before a tag's latest slot cannot be answered by the summary.
    assert ranked(summary[T["tags"]], days, last - timedelta(days=1)) is None


def test_wide_sets_and_big_counts_keep_their_estimates() -> None:
    store: Store = {}
    flush(store, [(1, 5, song, 0) for song in range(3000)] + [(1, 6, song, 1) for song in range(300)])
    from_summary, from_docs = answers(store, 1, 7, START + timedelta(days=1))
    assert from_summary == from_docs and len(from_docs) == 2
    assert window_estimates([]) is None
    for values in ([3.0] * 7, [300.0] * 7, [70_000.0] * 7, [2.5] * 7, [1.0, 2.0, 2.0, 5.0, 5.0, 5.0, 5.0]):
        entry = encode_entry(4, 738_000, values)
        for k in range(1, 8):
            assert ranked({tag_key(4): entry}, k, date.fromordinal(738_000)) == [(4, values[k - 1])]
    # Trailing equal estimates are stored once: a tag heard on one day is 5 bytes.
    assert len(encode_entry(4, 738_000, [3.0] * 7)) == 5
    assert len(encode_entry(4, 738_000, [1.0, 2.0, 2.0, 5.0, 5.0, 5.0, 5.0])) == 4 + 4


def test_tags_mongodb_would_refuse_as_field_names_are_hashed_and_kept() -> None:
    assert tag_key(13) == "i13" and tag_key("rock") == "srock"
    key = tag_key("drum.and.bass")
    assert "." not in key and key.startswith("x")
    entry = encode_entry("drum.and.bass", 738_000, [1.0] * 7)
    assert tag_of(key, entry) == "drum.and.bass"


def test_a_replayed_window_writes_no_summary_and_an_unchanged_tag_is_not_recomputed() -> None:
    store: Store = {}
    events = [(3, tag, song, day) for tag in (1, 2) for song in range(5) for day in (0, 1)]
    flush(store, events)
    plan = flush(store, events)  # the same window again (a replay)
    top = plan[-1]
    assert top.collection == T["collection"] and top.compute is not None
    assert top.compute(store[(T["collection"], "i3")]) == {}


def test_a_summary_computed_before_its_tags_refuses() -> None:
    agg = ListenSketches(ListenDecoder(10**6, 300, clock=lambda: 2e9), 12, HeardSpec())
    assert agg.ingest(b'{"user": 1, "tag": 2, "song": 3, "ts": 1.7e9}') is None
    _tag, top = agg.plan()
    assert top.compute is not None
    with pytest.raises(RuntimeError, match="before its tag"):
        top.compute(None)


def test_many_new_entries_are_written_as_one_field_and_a_few_as_paths() -> None:
    store: Store = {}

    def summary_paths(events: list[tuple[Id, Id, int, int]]) -> set[str]:
        before = dict(store)
        plan = flush(store, events)
        top = plan[-1]
        assert top.compute is not None
        return set(top.compute(before.get((top.collection, top.id))))

    assert summary_paths([(5, tag, 1, 0) for tag in range(12)]) == {T["tags"]}  # a new summary
    assert summary_paths([(5, tag, 2, 1) for tag in range(10)]) == {T["tags"]}  # more than WHOLE_AT
    assert summary_paths([(5, tag, 3, 2) for tag in (20, 3)]) == {f"{T['tags']}.i20", f"{T['tags']}.i3"}
    from_summary, from_docs = answers(store, 5, 7, START + timedelta(days=2))
    assert from_summary == from_docs and len(from_docs) == 13


def test_a_summary_that_would_grow_too_big_is_given_up_and_the_slots_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pipeline.kinds.listens import tops
    from pipeline.kinds.listens.query import usable_entries
    from pipeline.kinds.listens.summaries import whole

    monkeypatch.setattr(tops, "MAX_BYTES", 100)  # about 5 entries
    store: Store = {}
    flush(store, [(6, tag, 1, 0) for tag in range(3)])
    summary = store[(T["collection"], "i6")]
    assert usable_entries(summary, T) is not None and not summary.get(T["full"])
    plan = flush(store, [(6, tag, 2, 1) for tag in range(3, 12)])
    summary = store[(T["collection"], "i6")]
    assert summary[T["full"]] is True and summary[T["tags"]] == {}
    assert usable_entries(summary, T) is None  # top tags read the (user, tag) documents
    top = plan[-1]
    assert top.compute is not None and top.compute(summary) == {}  # given up for good
    assert whole(6, {tag_key(t): encode_entry(t, 738_000, [1.0] * 7) for t in range(12)}, T)[T["full"]]
