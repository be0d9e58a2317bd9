"""Exact top pages from top lists (pure): the threshold ranking, sealing, batch-order admission."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kinds.hits.sites.caps import OTHER_PAGE, PageCaps, entry_bytes
from pipeline.kinds.hits.sites.rank import PeriodList, plan, rank
from pipeline.kinds.hits.sites.seal import consistent, exact_list

PAGES = [f"/p{i}" for i in range(30)]
BUDGET = 5 * entry_bytes("/p10")  # five entries


def arrival_list(hits: list[str]) -> dict[str, int]:
    """A list written in arrival order, as a worker without sealing writes it."""
    caps = PageCaps(top_pages_bytes=BUDGET)
    out: Counter[str] = Counter()
    for page in hits:
        out[caps.top_key(("s", "d", 1), page)] += 1
    return dict(out)


def truth_rows(periods: list[list[str]], limit: int) -> list[tuple[str, int]]:
    total: Counter[str] = Counter()
    for hits in periods:
        total.update(hits)
    return sorted(total.items(), key=lambda r: (-r[1], r[0]))[:limit]


period_hits = st.lists(st.sampled_from(PAGES[:12]) | st.sampled_from(PAGES), min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(
    periods=st.lists(
        st.tuples(period_hits, st.sampled_from(["arrival", "sealed", "sealed+more"])), max_size=6
    ),
    limit=st.integers(1, 8),
)
def test_an_answer_said_exact_is_the_truth_and_otherwise_the_bound_holds(
    periods: list[tuple[list[str], str]], limit: int
) -> None:
    lists = []
    for hits, how in periods:
        if how == "arrival":
            lists.append(PeriodList.of(arrival_list(hits)))
            continue
        half = hits if how == "sealed" else hits[: len(hits) // 2]
        exact, below = exact_list(Counter(half), BUDGET, len(half))
        pages = dict(exact)
        caps = PageCaps(top_pages_bytes=BUDGET)
        caps.seed_top(("s", "d", 1), pages)
        for page in hits[len(half) :]:  # written after the seal, by a worker that knows the new list
            key = caps.top_key(("s", "d", 1), page)
            pages[key] = pages.get(key, 0) + 1
        lists.append(PeriodList.of(pages, len(half), below))
    truth: Counter[str] = Counter()
    for hits, _ in periods:
        truth.update(hits)
    p = plan(lists, limit)
    answer = rank(p, {k: truth[k] for k in p.read}, limit)
    want = truth_rows([h for h, _ in periods], limit)
    if answer.exact:
        assert answer.rows == want
    else:
        shown = dict(answer.rows)
        missing = [n for page, n in want if page not in shown]
        assert all(n <= answer.bound for n in missing)
        assert all(truth[page] - n <= answer.bound for page, n in answer.rows)


@given(st.lists(st.sampled_from(PAGES), min_size=1, max_size=200), st.integers(1, 5))
def test_one_sealed_period_ranks_exactly_up_to_its_list(hits: list[str], limit: int) -> None:
    exact, below = exact_list(Counter(hits), BUDGET, len(hits))
    p = plan([PeriodList.of(exact, len(hits), below)], limit)
    answer = rank(p, {}, limit)
    want = truth_rows([hits], limit)
    listed = sorted(((k, n) for k, n in exact.items() if k != OTHER_PAGE), key=lambda r: (-r[1], r[0]))
    if len(listed) >= limit and listed[limit - 1][1] > below:
        assert answer.exact and answer.rows == want


def test_exact_list_keeps_a_prefix_of_the_ranking_and_the_rest_as_other() -> None:
    totals = {"/a": 9, "/b": 7, "/c": 7, "/d": 1}
    out, below = exact_list(totals, entry_bytes("/a") * 2, 24 + 3)  # 3 capped hits without documents
    assert out == {"/a": 9, "/b": 7, OTHER_PAGE: 11} and below == 7
    assert consistent(27, totals.values(), 3) and not consistent(27, totals.values(), 0)


def test_a_batch_admits_its_busiest_pages_first() -> None:
    from datetime import UTC, datetime

    from pipeline.kinds.hits.aggregate import plan_hits
    from pipeline.kinds.hits.layout import hits_fields

    f = hits_fields()
    minute = int(datetime(2015, 5, 17, tzinfo=UTC).timestamp()) // 60
    counts = {("s.test", "/early", minute): 1, ("s.test", "/busy", minute + 5): 50}
    caps = PageCaps(top_pages_bytes=entry_bytes("/busy"))
    docs = plan_hits(counts, f, caps=caps)
    top = next(d for d in docs if d.collection == f.rollups.top_daily.collection)
    assert top.inc == {
        f"{f.rollups.top_daily.pages}./busy": 50,
        f"{f.rollups.top_daily.pages}.{OTHER_PAGE}": 1,
    }


def test_a_period_is_sealed_once_settled_and_every_minute_while_it_stays_open() -> None:
    from pipeline.kinds.hits.layout import hits_fields
    from pipeline.kinds.hits.sites.seal import OPEN_EVERY, SETTLE, TopSealer

    now = [0.0]
    sealer = TopSealer(None, hits_fields(), 4096, clock=lambda: now[0])  # type: ignore[arg-type]
    sealer.touched([("a.test", 1)], [])
    assert sealer.due() == []
    now[0] = SETTLE
    assert sealer.due() == [("a.test", "d", 1)]  # settled: no write for SETTLE seconds
    live = TopSealer(None, hits_fields(), 4096, clock=lambda: now[0])  # type: ignore[arg-type]
    for second in range(int(OPEN_EVERY) + 1):
        now[0] = float(second)
        live.touched([("b.test", 1)], [])
        if second < OPEN_EVERY:
            assert live.due() == [], second
    assert live.due() == [("b.test", "d", 1)]  # written every second, due after a minute
