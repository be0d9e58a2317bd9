"""Open visits saved and restored (pipeline/core/open_visits.py): a reading cut anywhere and
continued from the saved state counts the visits of one reading; a damaged part is refused."""

from __future__ import annotations

import contextlib

import bson
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.open_visits import ROW, OpenVisitsError, restored, saved
from pipeline.core.sessions import Sessions, Visit
from pipeline.testing.packed import changed, rows_changed

T = 1800.0
H = 1_764_000_000.0

hits_st = st.lists(
    st.tuples(
        st.sampled_from(["a.example", "b.example"]),
        st.integers(0, 5),
        st.integers(0, 6 * 3600).map(lambda s: H + s),
        st.sampled_from(["/", "/a", "/é/b"]),
    ),
    min_size=1,
    max_size=60,
)


def shape(visits: list[Visit]) -> list[tuple[object, ...]]:
    return sorted((v.site, v.visitor, v.start, v.end, v.views, v.entry, v.exit) for v in visits)


@given(hits_st, st.integers(0, 60), st.sampled_from([0.0, 300.0, 3600.0]), st.sampled_from([200, 10_000]))
@settings(max_examples=300, deadline=None)
def test_a_reading_continued_from_its_saved_state_counts_what_one_reading_counts(
    hits: list[tuple[str, int, float, str]], cut: int, grace: float, max_bytes: int
) -> None:
    whole = Sessions(T, grace)
    once: list[Visit] = []
    for pos, (site, who, ts, page) in enumerate(hits):
        once.extend(whole.add(site, who, ts, page, pos))
    once.extend(whole.close(float("inf")))

    cut = min(cut, len(hits))
    first = Sessions(T, grace)
    counted: list[Visit] = []
    for pos in range(cut):
        counted.extend(first.add(*hits[pos], pos))
    parts = saved(first, max_bytes)
    again = restored(parts, T, grace)
    assert len(again) == len(first) and again.seen == first.seen
    assert again.resume(cut) == first.resume(cut)
    for pos in range(cut, len(hits)):
        counted.extend(again.add(*hits[pos], pos))
    counted.extend(again.close(float("inf")))
    assert shape(counted) == shape(once)


def test_parts_stay_under_their_bound_and_keep_a_visitors_visits_together() -> None:
    s = Sessions(T)
    for i in range(3_000):
        s.add("s", i % 1_000, H + i, f"/p{i % 50}", i)
    parts = saved(s, 20_000)
    assert len(s) == 1_000 and len(parts) > 1 and all(len(p) <= 20_000 for p in parts)
    visitors = [{int(v) for v in np.frombuffer(bson.decode(p)["rows"], dtype=ROW)["visitor"]} for p in parts]
    assert sum(len(v) for v in visitors) == len(set().union(*visitors))  # no visitor in two parts
    assert len(restored(parts, T, 0.0)) == len(s)


def test_an_empty_state_saves_as_one_part() -> None:
    parts = saved(Sessions(T))
    assert len(parts) == 1
    s = restored(parts, T, 0.0)
    assert len(s) == 0 and s.seen is None


def _saved() -> bytes:
    s = Sessions(T)
    s.add("s", 1, H, "/", 0)
    s.add("s", 1, H + 60, "/b", 1)
    return saved(s)[0]


def _one_part(**change: object) -> bytes:
    return changed(_saved(), **change)


def _rows(**column: object) -> bytes:
    return rows_changed(_saved(), ROW, **column)


@pytest.mark.parametrize(
    ("part", "says"),
    [
        (b"\x05\x00\x00\x00", "not a BSON document"),
        (_one_part(v=2), "version 2"),
        (_one_part(seen="x"), "not a finite time"),
        (_one_part(seen=float("nan")), "not a finite time"),
        (_one_part(pages=[1]), "pages is not a list of strings"),
        (_one_part(rows=bson.Binary(b"\x00" * 5)), "whole"),
        (_rows(site=7), "does not list"),
        (_rows(exit=9), "does not list"),
        (_rows(end=float("inf")), "not finite"),
        (_rows(views=0), "no views"),
        (_rows(start=H + 999_999), "ending before it starts"),
    ],
)
def test_a_damaged_part_is_refused_naming_what_is_wrong(part: bytes, says: str) -> None:
    with pytest.raises(OpenVisitsError, match=says):
        restored([part], T, 0.0)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_bytes_restore_or_are_refused_never_another_error(raw: bytes) -> None:
    with contextlib.suppress(OpenVisitsError):
        restored([raw], T, 0.0)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8))
@settings(max_examples=500, deadline=None)
def test_a_saved_part_with_bytes_changed_restores_or_is_refused(changes: list[tuple[int, int]]) -> None:
    raw = bytearray(_one_part())
    for at, byte in changes:
        raw[at % len(raw)] = byte
    with contextlib.suppress(OpenVisitsError):
        restored([bytes(raw)], T, 0.0)
