"""Site rollups equal the sum of their pages; page caps, top pages and page normalisation (pure)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.calendar import Calendar, ZoneChange, dt_minute
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.aggregate import HitCounts, plan_hits
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.pages import PageRules, QueryPolicyError
from pipeline.kinds.hits.sites.caps import OTHER_PAGE, PageCaps, entry_bytes
from pipeline.kinds.hits.sites.tiers import NOTHING_PRUNED, Pruned

F = hits_fields("readable")
R = F.rollups
ZONES = {"berlin": "Europe/Berlin", "ny": "America/New_York", "kolkata": "Asia/Kolkata", "utc": "UTC"}
#: 2026-10-24 .. 2026-11-03: both DST ends (Europe 25 Oct, America 1 Nov) inside.
LO = dt_minute(datetime(2026, 10, 24, tzinfo=UTC))
SPAN = 10 * 1440


class Zones:
    def __init__(self, pruned: Pruned = NOTHING_PRUNED) -> None:
        self.cals = {s: Calendar([ZoneChange(None, z)]) for s, z in ZONES.items()}
        self.pruned = pruned

    def calendar(self, site: str) -> Calendar:
        return self.cals[site]

    def retention(self) -> Pruned:
        return self.pruned


class Keys:
    def keys(self, site: str, name: str, value: str) -> tuple[str, str]:
        return name, value


def sums(plan: list[DocUpdate], collection: str, by_site: bool) -> dict[tuple[str, object], Counter[str]]:
    """Per (site, date) the counters of ``collection``'s documents (pages' summed per site)."""
    out: dict[tuple[str, object], Counter[str]] = {}
    for u in plan:
        if u.collection != collection:
            continue
        site = u.key[f"{F.daily.metadata}.{F.daily.site}"]
        day = u.set_on_insert[f"{F.daily.metadata}.{F.daily.date}"]
        c = out.setdefault((site, day), Counter())
        for path, n in u.inc.items():
            if path != R.daily.capped:
                c[path] += n
    return out


stream = st.lists(
    st.tuples(
        st.sampled_from(sorted(ZONES)),
        st.sampled_from(["/", "/a", "/b/c", "/d.e", "/$x"]),
        st.integers(0, SPAN - 1),
        st.integers(1, 3),
        st.sampled_from([(), (("lang", "de"),), (("lang", "en"), ("dev", "m"))]),
    ),
    min_size=1,
    max_size=200,
)


@settings(max_examples=60, deadline=None)
@given(stream, st.integers(0, 12), st.integers(0, 12), st.integers(0, 4))
def test_rollups_are_the_sum_of_their_page_documents(
    events: list[tuple[str, str, int, int, tuple[tuple[str, str], ...]]],
    minute_cut: int,
    hour_cut: int,
    cap: int,
) -> None:
    """Any stream, in four zones across DST ends, with retention cutoffs and a page cap."""
    base = date(2026, 10, 23).toordinal()
    pruned = Pruned({"*": base + minute_cut}, {"*": base + hour_cut})
    counts: Counter[tuple[str, str, int]] = Counter()
    props: dict[tuple[str, str, int], Counter[tuple[str, str]]] = {}
    for site, page, minute, n, pairs in events:
        counts[site, page, LO + minute] += n
        for pair in pairs:
            props.setdefault((site, page, (LO + minute) // 15), Counter())[pair] += n
    caps = PageCaps(max_pages_per_day=cap)
    plan = plan_hits(counts, F, props, Keys(), Zones(pruned), caps)
    pages_daily = sums(plan, F.daily.collection, True)
    site_daily = sums(plan, R.daily.collection, True)
    pages_monthly = sums(plan, F.monthly.collection, True)
    site_monthly = sums(plan, R.monthly.collection, True)
    capped = sum(u.inc.get(R.daily.capped, 0) for u in plan if u.collection == R.daily.collection)
    if cap == 0:  # every page has documents: the rollups are exactly their sums
        assert site_daily == pages_daily
        assert site_monthly == pages_monthly
        assert capped == 0
    else:  # rollups count every hit; pages past the cap have none of their own
        for key, want in site_daily.items():
            got = pages_daily.get(key, Counter())
            assert all(got[p] <= n for p, n in want.items())
        total = sum(counts.values())
        assert sum(c[F.daily.total] for c in site_daily.values()) == total
        assert sum(c[F.daily.total] for c in pages_daily.values()) == total - capped
    # top pages: every hit once, under its page or (other)
    tops = {(u.collection, u.id): sum(u.inc.values()) for u in plan if "pages" in u.collection}
    for u in plan:
        if u.collection == R.daily.collection:
            assert tops[R.top_daily.collection, u.id] == u.inc[F.daily.total]
        if u.collection == R.monthly.collection:
            assert tops[R.top_monthly.collection, u.id] == u.inc[F.monthly.total]


def test_a_page_past_the_days_cap_is_counted_in_the_rollups_only() -> None:
    caps = PageCaps(max_pages_per_day=2)
    counts = {("s", f"/p{i}", LO + i): 1 for i in range(5)}
    plan = plan_hits(counts, F, caps=caps)
    pages = {u.key[f"{F.daily.metadata}.{F.daily.page}"] for u in plan if u.collection == F.daily.collection}
    assert len(pages) == 2
    (site,) = [u for u in plan if u.collection == R.daily.collection]
    assert site.inc[F.daily.total] == 5 and site.inc[R.daily.capped] == 3
    (top,) = [u for u in plan if u.collection == R.top_daily.collection]
    assert top.inc[f"{R.top_daily.pages}.{OTHER_PAGE}"] == 3
    assert caps.capped_pages == 3 and caps.capped_hits == 3
    # the same day, a later flush: an admitted page stays admitted, new ones stay out
    again = plan_hits({("s", "/p0", LO + 9): 1, ("s", "/new", LO + 9): 1}, F, caps=caps)
    page_key = f"{F.daily.metadata}.{F.daily.page}"
    assert {u.key.get(page_key) for u in again if u.collection == F.daily.collection} == {"/p0"}


def test_top_pages_are_exact_below_the_budget_and_the_tail_is_other() -> None:
    names = [f"/page-{i:03d}" for i in range(50)]
    budget = sum(entry_bytes(n) for n in names[:10])
    caps = PageCaps(top_pages_bytes=budget)
    counts = {("s", n, LO + i): 100 - i for i, n in enumerate(names)}
    (site,) = [u for u in plan_hits(counts, F, caps=caps) if u.collection == R.top_daily.collection]
    top = {p.split(".", 1)[1]: n for p, n in site.inc.items()}
    assert {k: v for k, v in top.items() if k != OTHER_PAGE} == {n: 100 - i for i, n in enumerate(names[:10])}
    assert top[OTHER_PAGE] == sum(100 - i for i in range(10, 50))
    # a budget over the pages: exact
    big = PageCaps(top_pages_bytes=10**6)
    (site,) = [u for u in plan_hits(counts, F, caps=big) if u.collection == R.top_daily.collection]
    assert f"{R.top_daily.pages}.{OTHER_PAGE}" not in site.inc


def test_seeded_caps_count_what_the_store_already_has() -> None:
    caps = PageCaps(max_pages_per_day=2, top_pages_bytes=entry_bytes("/a") + entry_bytes("/b"))
    day = date(2026, 10, 24).toordinal()
    caps.seed_pages("s", day, ["/a", "/b"])
    caps.seed_top(("s", "d", day), ["/a", "/b"])
    assert caps.admits("s", day, "/a") and not caps.admits("s", day, "/c")
    assert caps.top_key(("s", "d", day), "/b") == "/b"
    assert caps.top_key(("s", "d", day), "/c") == OTHER_PAGE


def test_the_aggregator_counts_rollup_documents_and_periods() -> None:
    agg = HitCounts(HitDecoder(10_000, 1e12), F)
    ts = datetime(2026, 10, 24, 12, tzinfo=UTC).timestamp()
    for page in ("/a", "/b"):
        assert agg.ingest(orjson.dumps({"site": "s", "page": page, "ts": ts})) is None
    assert agg.documents() == 2 * 2 + 4 * 1
    days, months = agg.periods()
    assert days == {("s", date(2026, 10, 24).toordinal())}
    assert months == {("s", date(2026, 10, 1).toordinal())}


@pytest.mark.parametrize(
    ("policy", "page", "want"),
    [
        ("drop", "/search?q=x&lang=de", "/search"),
        ("keep", "/search?q=x&lang=de", "/search?q=x&lang=de"),
        ("allow:lang,id", "/search?q=x&lang=de&id=3", "/search?lang=de&id=3"),
        ("allow:id", "/search?q=x", "/search"),
        ("drop", "/a/", "/a"),
        ("drop", "/", "/"),
        ("drop", "//a//b/", "/a/b"),
        ("drop", "/%7Euser/%61b%2f", "/~user/ab%2F"),
        ("drop", "/a#frag", "/a"),
        ("drop", "https://example.org/x/?y=1", "/x"),
        ("drop", "https://example.org", "/"),
        ("drop", "?only=query", "/"),
        ("drop", "home", "home"),
        ("drop", "/About", "/About"),
    ],
)
def test_pages_are_normalised(policy: str, page: str, want: str) -> None:
    assert PageRules.parse(policy)(page) == want


def test_paths_may_be_lower_cased_and_bad_policies_are_refused() -> None:
    assert PageRules.parse("drop", lowercase=True)("/About/") == "/about"
    for bad in ("", "strip", "allow:", "allow: ,"):
        with pytest.raises(QueryPolicyError, match="PREAGG_HITS_QUERY_STRING"):
            PageRules.parse(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=60), st.sampled_from(["drop", "keep", "allow:a,b"]), st.booleans())
def test_normalising_twice_changes_nothing(page: str, policy: str, lower: bool) -> None:
    rules = PageRules.parse(policy, lower)
    once = rules(page)
    assert once and rules(once) == once


def test_the_held_page_names_are_bounded_least_recently_used_first() -> None:
    caps = PageCaps(max_pages_per_day=10, periods=100, max_held=25)
    for day in range(5):
        caps.seed_pages("s", day, [f"/p{i}" for i in range(10)])
        assert caps._held <= 25
    assert caps.knows_pages("s", 4) and caps.knows_pages("s", 3) and not caps.knows_pages("s", 0)
    assert caps.admits("s", 4, "/p1") and not caps.admits("s", 4, "/new")  # day 4 is full
