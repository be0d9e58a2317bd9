"""HLL codec (explicit, sparse, dense), union and replay, weekday slots, Last.fm reading (no servers)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from bson import Binary
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.bloom import members_bits
from pipeline.core.hll import DENSE, EXPLICIT, EXPLICIT_MAX, SPARSE, Sketch, decode
from pipeline.core.ids import to_int64
from pipeline.files import Accepted, Refused
from pipeline.kinds.listens.aggregate import ListenSketches, day_and_slot, merge_slot
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.files import read_lastfm
from pipeline.kinds.listens.heard import LEGACY, MAX_FILTERS, HeardSpec
from pipeline.kinds.listens.layout import listen_fields
from pipeline.kinds.listens.query import heard_in
from pipeline.testing.stored import after_set


def sketch_of(items: range | list[int]) -> Sketch:
    s = Sketch.empty()
    for x in items:
        s.add(x)
    return s


@pytest.mark.parametrize(
    ("n", "form"), [(1, EXPLICIT), (10, EXPLICIT), (EXPLICIT_MAX, EXPLICIT), (500, SPARSE)]
)
def test_round_trip_and_form(n: int, form: int) -> None:
    s = sketch_of(range(n))
    data = s.encode()
    assert data[0] >> 5 == form
    assert decode(data).estimate() == pytest.approx(s.estimate())
    assert decode(data).encode() == data


def test_sizes_small_sets_are_small() -> None:
    assert len(sketch_of(range(1)).encode()) == 9
    assert len(sketch_of(range(10)).encode()) <= 100
    dense = sketch_of(range(20_000)).encode()
    assert dense[0] >> 5 == DENSE and len(dense) == 1 + 3072


def test_exact_below_the_explicit_limit_and_close_above() -> None:
    for n in (1, 7, 99, EXPLICIT_MAX):
        assert sketch_of(range(n)).estimate() == n
    est = sketch_of(range(50_000)).estimate()
    assert abs(est - 50_000) / 50_000 < 0.05


def test_union_promotes_and_replay_changes_nothing() -> None:
    a, b = sketch_of(range(100)), sketch_of(range(50, 200))  # both explicit, union is not
    u = a.union(b)
    assert u.hashes is None and abs(u.estimate() - 200) <= 2
    again = u.union(b).union(a)  # a replayed flush unions the same sketches again
    assert again.encode() == u.encode()
    big = sketch_of(range(10_000))
    assert big.union(big).encode() == big.encode()
    assert decode(big.encode()).union(a).estimate() == pytest.approx(big.union(a).estimate())


F = listen_fields()


def test_weekday_slot_rules() -> None:
    s = sketch_of(range(5))
    assert day_and_slot(0) == ("19700101", "4")  # a Thursday
    new = merge_slot(None, "20261119", s, F)
    assert new is not None and new[F["date"]] == "20261119"
    same = merge_slot(new, "20261119", sketch_of(range(3, 8)), F)
    assert same is not None and decode(bytes(same[F["sketch"]])).estimate() == 8
    rolled = merge_slot(same, "20261126", sketch_of(range(2)), F)  # next week, same weekday
    assert rolled is not None and decode(bytes(rolled[F["sketch"]])).estimate() == 2
    assert merge_slot(rolled, "20261112", s, F) is None  # more than a week older: whole only


def test_plan_merges_into_stored_document() -> None:
    agg = ListenSketches(ListenDecoder(1000, 300, clock=lambda: 2e9), 12, HeardSpec())
    day = 1_763_596_800  # 2025-11-20, a Thursday
    for song in range(6):
        agg.ingest(b'{"user": 1, "tag": "rock", "song": %d, "ts": %d}' % (song, day + song))
    agg.ingest(b'{"user": 1, "tag": "rock", "song": 99, "ts": %d}' % (day - 7 * 86400))  # older week
    u, _top = agg.plan()
    assert u.compute is not None and not u.bit_or
    stored = {
        F["slots"]: {"4": {F["date"]: "20251120", F["sketch"]: Binary(sketch_of([100, 101]).encode())}},
        F["whole"]: Binary(sketch_of([100, 101]).encode()),
    }
    out = u.compute(stored)
    slot = out[f"{F['slots']}.4"]
    assert slot[F["date"]] == "20251120"
    from pipeline.core.hll import song_hash

    hashes = decode(bytes(slot[F["sketch"]])).hashes or set()
    assert len(hashes) == 8 and song_hash(99) not in hashes  # the older week's song is not in the slot
    assert decode(bytes(out[F["whole"]])).estimate() == 9
    assert u.compute(None)[f"{F['slots']}.4"][F["date"]] == "20251120"
    # heard: the explicit sketch answers exactly, no filter is stored
    assert F["filters"] not in out and F["heard"] not in out
    doc = {F["whole"]: out[F["whole"]]}
    assert all(heard_in(doc, song, F, HeardSpec()) for song in [*range(6), 99, 100, 101])
    assert not any(heard_in(doc, song, F, HeardSpec()) for song in range(200, 300))


def window_of(songs: list[int], user: int = 1, tag: int = 2) -> ListenSketches:
    agg = ListenSketches(ListenDecoder(1000, 300, clock=lambda: 2e9), 12, HeardSpec())
    for song in songs:
        agg.ingest(b'{"user": %d, "tag": %d, "song": %d, "ts": 1763596800}' % (user, tag, song))
    return agg


def stored_after(stored: dict[str, object] | None, out: dict[str, object]) -> dict[str, object]:
    """The document as MongoDB gives it back after ``$set`` of ``out`` (BinData read as bytes)."""
    return after_set({F["slots"]: {}, **(stored or {})}, out)


def apply(stored: dict[str, object] | None, songs: list[int]) -> tuple[dict[str, object], dict[str, object]]:
    u, _top = window_of(songs).plan()
    assert u.compute is not None
    out = u.compute(stored)
    return stored_after(stored, out), out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=400), min_size=1, max_size=6))
def test_heard_has_no_false_negatives_and_a_replay_writes_nothing(windows: list[list[int]]) -> None:
    """Whatever the windows: every song is heard (explicit, then filters built from its hashes), and
    each window replayed on the result changes nothing."""
    doc: dict[str, object] | None = None
    seen: set[int] = set()
    for songs in windows:
        doc, _ = apply(doc, songs)
        seen.update(songs)
        assert all(heard_in(doc, s, F, HeardSpec()) for s in seen)
    assert doc is not None
    assert (F["filters"] in doc) == (len(seen) > EXPLICIT_MAX)
    for songs in windows:
        assert apply(doc, songs)[1] == {}


def test_filters_grow_and_keep_the_rate() -> None:
    """10,000 songs: filters opened as the count passes 256, 768, ...; false positives below 1%."""
    doc: dict[str, object] | None = None
    for start in range(0, 10_000, 500):
        doc, _ = apply(doc, list(range(start, start + 500)))
    assert doc is not None
    filters = doc[F["filters"]]
    assert isinstance(filters, list) and len(filters) == HeardSpec().count_for(10_000) == 6
    assert all(heard_in(doc, s, F, HeardSpec()) for s in range(10_000))
    false = sum(heard_in(doc, s, F, HeardSpec()) for s in range(10**6, 10**6 + 20_000))
    assert false / 20_000 < 0.01
    # A filter sized beforehand for exactly 10,000 would be 1.2 bytes per song; growing ones
    # cost their unfilled last filter and tighter rates (docs/listens.md).
    assert sum(len(b) for b in filters) < 10_000 * 3.2


def test_documents_written_before_keep_their_filter() -> None:
    """The single filter of older documents (int64 words or BinData) is still read, never grown."""
    legacy_words = {str(w): to_int64(m) for w, m in members_bits(range(300), LEGACY).items()}
    big = Binary(sketch_of(range(300)).encode())  # past the explicit form, as such documents are
    u, _top = window_of([7000]).plan()
    assert u.compute is not None
    out = u.compute({F["whole"]: big, F["heard"]: legacy_words})
    assert F["heard"] not in out  # untouched
    doc = stored_after({F["whole"]: big, F["heard"]: legacy_words}, out)
    assert all(heard_in(doc, s, F, HeardSpec()) for s in [*range(300), 7000])


def test_lastfm_reader_refuses_impossible_dates(tmp_path: Path) -> None:
    f = tmp_path / "user_taggedartists.dat"
    f.write_text(
        "userID\tartistID\ttagID\tday\tmonth\tyear\n2\t52\t13\t1\t4\t2009\n2\t52\t15\t31\t2\t2009\n3\tx\n"
        "4\t1\t1\t1\t1\t1956\n"
    )
    recs = list(read_lastfm([str(f)]))
    assert isinstance(recs[0], Accepted) and b'"song":52' in recs[0].raw and b'"tag":13' in recs[0].raw
    assert isinstance(recs[1], Refused) and recs[1].reason == "bad_date" and recs[1].line_no == 3
    assert isinstance(recs[2], Refused) and recs[2].reason == "lastfm"
    assert isinstance(recs[3], Refused) and recs[3].reason == "bad_date"
    assert "before Last.fm" in recs[3].detail


def test_estimates_at_1000_distinct_average_within_2_percent() -> None:
    rng = random.Random(5)
    errors = []
    for _ in range(30):
        items = rng.sample(range(10**9), 1000)
        errors.append(abs(sketch_of(items).estimate() - 1000) / 1000)
    assert sum(errors) / len(errors) <= 0.02


def test_a_replayed_window_on_its_own_result_writes_nothing() -> None:
    """Steady streams repeat songs: fields the union leaves as stored are not written again."""

    def window() -> ListenSketches:
        agg = ListenSketches(ListenDecoder(1000, 300, clock=lambda: 2e9), 12, HeardSpec())
        for song in range(5):
            agg.ingest(b'{"user": 1, "tag": 2, "song": %d, "ts": 1763596800}' % song)
        return agg

    first, _top = window().plan()
    assert first.compute is not None
    fields = first.compute(None)
    # the document as MongoDB gives it back: nested slots, BinData subtype 0 read as bytes
    stored: dict[str, object] = {F["slots"]: {}}
    for path, value in fields.items():
        if path.startswith(F["slots"] + "."):
            slot = {k: bytes(v) if isinstance(v, bytes) else v for k, v in value.items()}
            stored[F["slots"]][path.split(".")[1]] = slot  # type: ignore[index]
        else:
            stored[path] = bytes(value)
    again, _top = window().plan()
    assert again.compute is not None and again.compute(stored) == {}
    agg = window()
    agg.ingest(b'{"user": 1, "tag": 2, "song": 77, "ts": 1763596800}')  # one new song: written
    more, _top = agg.plan()
    assert more.compute is not None and set(more.compute(stored)) == {f"{F['slots']}.4", F["whole"]}


def test_filters_stop_opening_before_the_document_limit() -> None:
    """Past about 2.1 million songs no filter opens: a document stays far below 16 MB."""
    spec = HeardSpec()
    assert spec.count_for(10**9) == MAX_FILTERS == 13
    assert sum(spec.spec(i).m for i in range(MAX_FILTERS)) / 8 < 5 * 2**20


def test_exact_counts_are_shown_as_integers_estimates_with_one_decimal() -> None:
    """`preagg query top-tags` printed an exact 4 as `4.0`."""
    from pipeline.kinds.listens.query import shown_top_tags

    shown = shown_top_tags([("rock", 4.0), ("jazz", 1234.5678)])
    assert shown == [("rock", 4), ("jazz", 1234.6)] and isinstance(shown[0][1], int)
