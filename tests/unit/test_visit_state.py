"""A partition of the visits stage (pipeline/core/visit_state.py): read in flushes, saved as a
head and parts after each and loaded back, it closes the visits of one uninterrupted reading;
copies and other groups' messages are skipped; a lagging source holds the watermark; a damaged
head is refused."""

from __future__ import annotations

import math
from typing import Any

import bson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.sessions import Visit
from pipeline.core.visit_hits import Packed, VisitHit
from pipeline.core.visit_state import PartitionVisits, Taken, VisitStateError, loaded

T, G = 1800.0, 300.0
H = 1_764_000_000.0
GROUP = "g"

hits_st = st.lists(
    st.tuples(
        st.integers(0, 2),  # source partition
        st.sampled_from(["a.example", "b.example"]),
        st.integers(0, 4),
        st.integers(0, 5 * 3600).map(lambda s: H + s),
        st.sampled_from(["/", "/a", "/b"]),
    ),
    min_size=1,
    max_size=50,
)


def messages(hits: list[tuple[int, str, int, float, str]], per: int) -> list[Packed]:
    """The hits as forwarded messages of ``per`` hits, each source's flushes numbered in order."""
    out: list[Packed] = []
    seq = dict.fromkeys(range(3), 0)
    for at in range(0, len(hits), per):
        chunk = hits[at : at + per]
        for src in sorted({h[0] for h in chunk}):
            seq[src] += 1
            mine = [VisitHit(site, who, ts, page) for s, site, who, ts, page in chunk if s == src]
            out.append(Packed(f"{GROUP}/hits@sites", src, seq[src], 0, mine, max(h.ts for h in mine)))
    return out


def shape(visits: list[Visit]) -> list[tuple[object, ...]]:
    return sorted((v.site, v.visitor, v.start, v.end, v.views, v.entry, v.exit) for v in visits)


def read(state: PartitionVisits, ms: list[Packed]) -> list[Visit]:
    closed: list[Visit] = []
    for m in ms:
        closed.extend(state.take(m, GROUP, Taken()))
    return closed


def saved_and_loaded(state: PartitionVisits, upto: int) -> PartitionVisits:
    """Through the stored form: the head and parts as BSON, decoded again."""
    head = bson.decode(bson.encode({"h": state.head(upto, 0)}))["h"]
    parts = state.parts()
    head["parts"] = len(parts)
    return loaded(head, parts, T, G)


@given(hits_st, st.integers(1, 7), st.lists(st.integers(0, 60), max_size=4))
@settings(max_examples=200, deadline=None)
def test_flushes_saved_and_loaded_between_them_close_the_visits_of_one_reading(
    hits: list[tuple[int, str, int, float, str]], per: int, cuts: list[int]
) -> None:
    ms = messages(hits, per)
    whole = PartitionVisits.empty(T, G)
    once = read(whole, ms)
    stops = sorted({min(c, len(ms)) for c in cuts} | {len(ms)})
    state, counted, at = PartitionVisits.empty(T, G), [], 0
    for stop in stops:
        counted.extend(read(state, ms[at:stop]))
        state = saved_and_loaded(state, stop)
        assert state.upto == stop
        at = stop
    assert shape(counted) == shape(once)
    assert len(state.sessions) == len(whole.sessions) and state.watermark() == whole.watermark()
    assert shape(state.sessions.close(math.inf)) == shape(whole.sessions.close(math.inf))


def test_copies_and_other_groups_messages_are_skipped_and_counted() -> None:
    hit = [VisitHit("a.example", 1, H, "/")]
    state, taken = PartitionVisits.empty(T, G), Taken()
    for m in (
        Packed("g/hits@sites", 0, 1, 0, hit, H),
        Packed("g/hits@sites", 0, 1, 0, hit, H),  # a retry's copy
        Packed("other/hits@sites", 0, 1, 0, hit, H),  # a deployment under another group id
        Packed("hits@sites", 0, 2, 0, hit, H),  # no group: not this stage's
    ):
        state.take(m, "g", taken)
    assert (taken.messages, taken.hits, taken.copies, taken.foreign) == (1, 1, 1, 2)
    assert state.sessions.open_visits()[0][0].views == 1


def test_the_slowest_source_holds_the_watermark_until_it_has_read_to_its_end() -> None:
    state = PartitionVisits.empty(T, G)
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/")], H), "g", Taken())
    late = H + T + G + 10
    closed = state.take(Packed("g/x", 1, 1, 0, [VisitHit("s", 2, late, "/")], late), "g", Taken())
    assert closed == [] and state.watermark() == H - G  # source 0 is behind: nothing closes
    closed = state.take(Packed("g/x", 0, 2, 0, [], H + 1, at_end=True), "g", Taken())
    assert [v.visitor for v in closed] == [1]  # source 0 read all it had: it holds nothing back
    assert state.watermark() == late - G
    closed = state.take(Packed("g/x", 1, 2, 0, [], late, at_end=True), "g", Taken())
    assert state.watermark() == late - G  # all at their ends: the newest time


def test_a_hit_behind_the_watermark_is_counted_late_and_starts_a_visit_of_its_own() -> None:
    """A partition at its end holds nothing back; a hit it sends later, behind the others' time
    less the grace, comes after its visit closed: the split is the documented limit, counted."""
    state, taken = PartitionVisits.empty(T, G), Taken()
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/a")], H), "g", taken)
    now = H + T + G + 100
    closed = state.take(Packed("g/x", 1, 1, 0, [], now, at_end=True), "g", taken)
    closed += state.take(Packed("g/x", 0, 2, 0, [], H, at_end=True), "g", taken)
    assert [v.visitor for v in closed] == [1] and taken.late == 0
    closed = state.take(Packed("g/x", 0, 3, 0, [VisitHit("s", 1, H + 60, "/b")], H + 60), "g", taken)
    assert taken.late == 1 and taken.late_by == now - G - (H + 60)
    assert state.sessions.open_visits()[0][0].entry == "/b"  # its own visit: the limit, not hidden


def test_a_message_without_hits_moves_its_sources_time_and_closes_visits() -> None:
    state = PartitionVisits.empty(T, G)
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/")], H), "g", Taken())
    closed = state.take(Packed("g/x", 0, 2, 0, [], H + T + G + 1), "g", Taken())
    assert [v.visitor for v in closed] == [1]


@pytest.mark.parametrize(
    "change",
    [
        {"v": 2},
        {"upto": -1},
        {"slot": 2},
        {"slot": True},
        {"parts": 3},
        {"taken": "1"},
        {"forwarded": [["g/x", 0, 1]]},
        {"forwarded": [["g/x", 0, 1, [-1]]]},
        {"sources": [["g/x", 0, float("nan"), False]]},
        {"sources": [["g/x", 0, 1.0, 0]]},
        {"expected": [["g/x", -2]]},
        {"sources": "x"},
    ],
)
def test_a_damaged_head_is_refused_naming_what_is_wrong(change: dict[str, Any]) -> None:
    state = PartitionVisits.empty(T, G)
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/")], H), "g", Taken())
    head = {**state.head(5, 1), **change}
    with pytest.raises(VisitStateError):
        loaded(head, state.parts(), T, G)


def test_a_damaged_part_is_refused() -> None:
    state = PartitionVisits.empty(T, G)
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/")], H), "g", Taken())
    with pytest.raises(VisitStateError):
        loaded(state.head(5, 1), [b"\x05\x00\x00\x00\x00"], T, G)
    assert len(loaded(state.head(5, 1), state.parts(), T, G).sessions) == 1


def test_a_partition_not_heard_from_holds_the_watermark() -> None:
    state = PartitionVisits.empty(T, G)
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/")], H, sources=2), "g", Taken())
    far = H + 10 * T
    # Partition 1 unheard: even with partition 0 read to its end, its hits may be any age.
    assert state.take(Packed("g/x", 0, 2, 0, [], far, True, sources=2), "g", Taken()) == []
    assert state.watermark() is None
    closed = state.take(Packed("g/x", 1, 1, 0, [], far, sources=2), "g", Taken())
    assert [v.visitor for v in closed] == [1]
    assert saved_and_loaded(state, 3).expected == {"g/x": 2}


def test_a_partition_its_owner_read_to_its_end_without_hits_holds_nothing_back() -> None:
    state = PartitionVisits.empty(T, G)
    state.take(Packed("g/x", 0, 1, 0, [VisitHit("s", 1, H, "/")], H, sources=2), "g", Taken())
    far = H + 10 * T
    closed = state.take(Packed("g/x", 0, 2, 0, [], far, True, sources=2, idle=(1,)), "g", Taken())
    assert [v.visitor for v in closed] == [1]


def test_the_stage_drops_the_states_of_partitions_it_no_longer_holds() -> None:
    """After a rebalance the states of lost partitions go (their next owner reads them from the
    store): memory and the open-visits gauge hold only this worker's."""
    from unittest.mock import Mock

    from pipeline.kinds.hits.visit_stage import VisitStage

    stage = VisitStage(Mock(), "compact", "g", "hits-visits", 1800.0, 0.0, Mock(), 10.0)
    stage.states = {p: PartitionVisits.empty(1800.0, 0.0) for p in range(4)}
    stage.keep({1, 3, 7})
    assert sorted(stage.states) == [1, 3]


def test_a_flush_past_the_bound_on_open_visits_closes_the_oldest_and_counts_them() -> None:
    """The bound holds a partition's open visits (memory, saved bytes): a flush that leaves more
    open closes the oldest by last hit, counted in its writes and as closed early."""
    from unittest.mock import Mock

    from pipeline.kinds.hits.planning.inputs import UTC_SITES
    from pipeline.kinds.hits.visit_stage import VisitsAggregate, VisitStage

    stage = VisitStage(Mock(), "compact", "g", "hits-visits", T, 10 * T, UTC_SITES, 10.0, max_open=3)
    agg = VisitsAggregate(stage, partition=0, start=None, end=1)
    agg.state = PartitionVisits.empty(T, 10 * T)
    hits = [VisitHit("s", who, H + who, "/") for who in range(5)]
    agg.messages.append(Packed("g/x", 0, 1, 0, hits, H + 5, sources=1))
    updates = stage.plan(agg)
    assert (agg.closed, agg.early, len(agg.state.sessions)) == (2, 2, 3)
    rollup = next(u for u in updates if u.collection.startswith("hits_site_daily"))
    assert any(v == 2 for k, v in rollup.inc.items() if k.endswith(".n"))  # both counted as visits
    stage.committed(agg)
    assert stage.early == 2
