"""The bot filter's arithmetic: a day less its bot hits, and top pages settled early yet exact."""

from __future__ import annotations

from datetime import date, datetime

from hypothesis import given
from hypothesis import strategies as st

from pipeline.kinds.hits.bots import humans_series, settled_top


def brute_top(pages: dict[str, tuple[int, int]], limit: int) -> list[tuple[str, int]]:
    rows = sorted(((p, t - b) for p, (t, b) in pages.items()), key=lambda r: (-r[1], r[0]))
    return [r for r in rows if r[1] > 0][:limit]


@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.integers(1, 60).flatmap(lambda t: st.tuples(st.just(t), st.integers(0, t))),
        max_size=30,
    ),
    st.integers(1, 12),
)
def test_top_pages_without_bots_equal_the_brute_force_answer(
    pages: dict[str, tuple[int, int]], limit: int
) -> None:
    ranked = sorted(((p, t) for p, (t, _) in pages.items()), key=lambda r: (-r[1], r[0]))
    bots: dict[str, int] = {}
    reads = 0
    while (answer := settled_top(ranked, bots, limit)) is None:
        page = ranked[len(bots)][0]  # one more page's bots, in order, as the query reads them
        bots[page] = pages[page][1]
        reads += 1
    assert answer == brute_top(pages, limit)
    assert reads <= len(ranked)


def test_settles_without_reading_the_tail() -> None:
    ranked = [("/a", 100), ("/b", 90), ("/c", 5), ("/d", 4)]
    assert settled_top(ranked, {"/a": 0}, 2) is None
    assert settled_top(ranked, {"/a": 0, "/b": 80}, 2) == [("/a", 100), ("/b", 10)]
    assert settled_top(ranked, {"/a": 0, "/b": 88}, 2) is None  # /c (5) could still beat /b (2)


def test_a_series_less_its_bots_per_day_and_per_month() -> None:
    days = [(datetime(2015, 5, d), 10) for d in (17, 18, 19)]
    bots = {date(2015, 5, 18): 4, date(2015, 5, 19): 10}
    assert humans_series(days, bots, "day") == [(days[0][0], 10), (days[1][0], 6), (days[2][0], 0)]
    months = [(datetime(2015, 5, 1), 30), (datetime(2015, 6, 1), 7)]
    assert humans_series(months, bots, "month") == [(months[0][0], 16), (months[1][0], 7)]
