"""The visit rules (pipeline/core/sessions.py): timeout edges, disorder, closing by event time,
the local day of a visit, and a replay that decides as the first reading did."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.sessions import (
    DURATION_BUCKETS,
    Sessions,
    Visit,
    bucket,
    median_duration,
    tally,
)

T = 1800.0
H = 1_764_000_000.0  # some instant; every test counts from it


def run(hits: list[tuple[int, float, str]], grace: float = 0.0, timeout: float = T) -> list[Visit]:
    """Every visit of ``hits`` (visitor, ts, page), in arrival order, closed at the end."""
    s = Sessions(timeout, grace)
    out: list[Visit] = []
    for pos, (who, ts, page) in enumerate(hits):
        out.extend(s.add("s", who, ts, page, pos))
    return out + s.close(float("inf"))


def shape(visits: list[Visit]) -> list[tuple[int, float, float, int, str, str]]:
    return sorted((v.visitor, v.start, v.end, v.views, v.entry, v.exit) for v in visits)


def test_a_gap_of_exactly_the_timeout_continues_the_visit_a_longer_one_starts_another() -> None:
    later = H + 2 * T + 0.001
    at = [(1, H, "/a"), (1, H + T, "/b"), (1, later, "/c")]
    assert shape(run(at)) == [(1, H, H + T, 2, "/a", "/b"), (1, later, later, 1, "/c", "/c")]


def test_entry_exit_duration_and_bounce() -> None:
    (v,) = run([(1, H, "/home"), (1, H + 60, "/pricing"), (1, H + 200, "/signup")])
    assert (v.entry, v.exit, v.duration, v.views, v.bounce) == ("/home", "/signup", 200.0, 3, False)
    (b,) = run([(2, H, "/only")])
    assert b.bounce and b.duration == 0.0


def test_a_hit_older_than_the_visit_moves_its_entry() -> None:
    (v,) = run([(1, H + 600, "/b"), (1, H + 900, "/c"), (1, H, "/a")], grace=T)
    assert (v.start, v.entry, v.exit, v.views) == (H, "/a", "/c", 3)


def test_a_hit_between_two_open_visits_joins_them() -> None:
    hits = [(1, H, "/a"), (1, H + 2 * T, "/c"), (1, H + T, "/b")]  # arrives last, bridges both
    assert shape(run(hits, grace=3 * T)) == [(1, H, H + 2 * T, 3, "/a", "/c")]


def test_visitors_and_sites_are_apart() -> None:
    s = Sessions(T)
    s.add("s", 1, H, "/", 0)
    s.add("s", 2, H + 1, "/", 1)
    s.add("t", 1, H + 2, "/", 2)
    assert len(s) == 3


def test_visits_close_by_event_time_not_by_the_wall_clock() -> None:
    """A backfill a year old closes its visits as its own events move on."""
    s = Sessions(T, grace=60)
    assert s.add("s", 1, H, "/a", 0) == []
    assert s.add("s", 2, H + T + 60, "/x", 1) == []  # watermark H + T: not more than T past H
    closed = s.add("s", 2, H + T + 60.5, "/y", 2)
    assert [(v.visitor, v.entry) for v in closed] == [(1, "/a")]


def test_a_hit_after_its_visit_closed_starts_another_it_is_counted_never_dropped() -> None:
    s = Sessions(T, grace=0)
    s.add("s", 1, H, "/a", 0)
    assert [v.visitor for v in s.add("s", 2, H + T + 1, "/z", 1)] == [1]
    s.add("s", 1, H + 10, "/late", 2)  # within T of the closed visit: too late to join it
    rest = s.close(float("inf"))
    assert sorted((v.visitor, v.entry) for v in rest) == [(1, "/late"), (2, "/z")]


def test_a_visit_counts_on_the_local_day_it_starts_across_midnight_and_dst() -> None:
    """Paris, the night summer time ends (2026-10-25: 03:00 CEST is 02:00 CET)."""
    zone = ZoneInfo("Europe/Paris")

    def day_of(site: str, ts: float) -> int:
        return datetime.fromtimestamp(ts, zone).date().toordinal()

    start = datetime(2026, 10, 24, 23, 50, tzinfo=zone).timestamp()
    hits = [(1, start, "/a"), (1, start + 20 * 60, "/b"), (1, start + 40 * 60, "/c")]  # past midnight
    dst = datetime(2026, 10, 25, 2, 50, tzinfo=zone, fold=0).timestamp()  # CEST, before the change
    # 02:50 CEST, 02:10 and 02:30 CET: local times go back, the visit lasts 40 minutes
    hits += [(2, dst, "/x"), (2, dst + 20 * 60, "/y"), (2, dst + 40 * 60, "/z")]
    totals, pages = tally(run(hits), day_of)
    sat, sun = datetime(2026, 10, 24).toordinal(), datetime(2026, 10, 25).toordinal()
    assert totals[("s", sat)].visits == 1 and totals[("s", sat)].duration == 40 * 60
    assert pages[("s", sat, "/c")] == (0, 1)  # its exit on the day it started
    assert totals[("s", sun)].visits == 1 and totals[("s", sun)].views == 3
    assert totals[("s", sun)].duration == 40 * 60
    assert ("s", sat) in totals and len(totals) == 2


def test_tally_adds_visits_bounces_views_durations_entries_and_exits() -> None:
    hits = [(1, H, "/a"), (1, H + 30, "/b"), (2, H, "/a"), (3, H + 5, "/b"), (3, H + 700, "/b")]
    totals, pages = tally(run(hits), lambda site, ts: 0)
    t = totals[("s", 0)]
    assert (t.visits, t.bounces, t.views, t.duration) == (3, 1, 5, 30 + 695)
    assert t.buckets[bucket(0)] == 1 and t.buckets[bucket(30)] == 1 and t.buckets[bucket(695)] == 1
    assert pages == {("s", 0, "/a"): (2, 1), ("s", 0, "/b"): (1, 2)}


def test_the_median_duration_is_its_buckets_bound() -> None:
    assert median_duration([0] * (len(DURATION_BUCKETS) + 1)) is None
    counts = [3, 0, 2, 0, 0, 0, 0, 0, 4]
    assert median_duration(counts) == DURATION_BUCKETS[2] and bucket(1e9) == len(DURATION_BUCKETS)


def _reference(hits: list[tuple[int, float, str]], timeout: float) -> list[tuple[int, float, float, int]]:
    """Visits of hits all known at once: each visitor's hits sorted, split at gaps over ``timeout``."""
    out = []
    for who in sorted({h[0] for h in hits}):
        times = sorted(ts for w, ts, _ in hits if w == who)
        start = prev = times[0]
        n = 1
        for ts in times[1:]:
            if ts - prev > timeout:
                out.append((who, start, prev, n))
                start, n = ts, 0
            prev = ts
            n += 1
        out.append((who, start, prev, n))
    return sorted(out)


streams = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 6 * 3600).map(float), st.sampled_from(["/a", "/b", "/c"])),
    min_size=1,
    max_size=60,
)


@given(streams)
@settings(max_examples=300, deadline=None)
def test_in_any_order_within_the_grace_visits_are_the_gaps_of_the_sorted_hits(
    hits: list[tuple[int, float, str]],
) -> None:
    got = [(v.visitor, v.start, v.end, v.views) for v in run(hits, grace=7 * 3600, timeout=T)]
    assert sorted(got) == _reference(hits, T)


@given(streams, st.integers(0, 60), st.sampled_from([0.0, 300.0, 3600.0]))
@settings(max_examples=300, deadline=None)
def test_a_replay_from_resume_counts_what_the_first_reading_counted(
    hits: list[tuple[int, float, str]], cut: int, grace: float
) -> None:
    """Read to ``cut`` and count the visits closed so far; start again from :meth:`resume` with its
    watermark, skip the closes decided before ``cut``: the visits are those of one reading."""
    whole = run(hits, grace=grace)
    cut = min(cut, len(hits))
    first = Sessions(T, grace)
    counted: list[Visit] = []
    for pos in range(cut):
        who, ts, page = hits[pos]
        counted.extend(first.add("s", who, ts, page, pos))
    r = first.resume(cut)
    again = Sessions(T, grace, seen=r.seen)
    for pos in range(r.position, len(hits)):
        who, ts, page = hits[pos]
        closed = again.add("s", who, ts, page, pos)
        if pos >= cut:
            counted.extend(closed)
    counted.extend(again.close(float("inf")))
    assert shape(counted) == shape(whole)


def test_the_bound_closes_the_visits_whose_last_hits_are_oldest_and_each_is_counted_once() -> None:
    """Past the bound on open visits, the oldest by last hit close before their time; a later hit
    of one starts another visit (a split, counted as such), never a visit lost or counted twice."""
    s = Sessions(T, 10 * T)  # a grace that closes nothing by itself
    for who in range(5):
        s.add("s", who, H + who, "/a", who)
    s.add("s", 0, H + 10, "/b", 5)  # visitor 0's visit is now the latest but one
    early = s.close_oldest(2)
    assert sorted(v.visitor for v in early) == [1, 2] and len(s) == 3
    s.add("s", 1, H + 20, "/c", 6)  # visitor 1 again: a visit of its own
    rest = s.close(float("inf"))
    assert sorted((v.visitor, v.views) for v in early + rest) == [
        (0, 2),
        (1, 1),
        (1, 1),
        (2, 1),
        (3, 1),
        (4, 1),
    ]
    assert s.close_oldest(3) == []
