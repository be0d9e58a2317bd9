"""Each hits planner on its own: the touched documents, minutes, totals, top lists, properties
and visitors (their composition, :func:`plan_hits`, is tested in test_plan and test_rollups)."""

from __future__ import annotations

from datetime import date

from pipeline.core.calendar import Calendar, ZoneChange
from pipeline.core.uniques import Budget
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.planning.counts import page_days_of, plan_minutes, plan_totals, rank_top_pages
from pipeline.kinds.hits.planning.documents import Touched
from pipeline.kinds.hits.planning.inputs import UTC_SITES, cap_key
from pipeline.kinds.hits.planning.props import plan_props
from pipeline.kinds.hits.planning.visitors import plan_visitors
from pipeline.kinds.hits.sites.caps import PageCaps, unlimited
from pipeline.kinds.hits.sites.tiers import NOTHING_PRUNED, Pruned
from pipeline.kinds.hits.visit_log import VisitLog

F = hits_fields("readable")
DAY = date(2026, 3, 2)
M0 = (DAY.toordinal() - date(1970, 1, 1).toordinal()) * 1440  # the day's first UTC minute


class Berlin:
    cal = Calendar([ZoneChange(None, "Europe/Berlin")])

    def calendar(self, site: str) -> Calendar:
        return self.cal

    def retention(self) -> Pruned:
        return NOTHING_PRUNED


def touched(caps: PageCaps | None = None, calendars: object = UTC_SITES) -> Touched:
    return Touched(F, calendars, caps or unlimited(), None, None, set())  # type: ignore[arg-type]


def test_a_document_is_made_once_on_first_touch_and_listed_in_touch_order() -> None:
    docs = touched()
    cal = UTC_SITES.calendar("s")
    first = docs.site_day("s", cal, DAY.toordinal(), M0)
    assert docs.site_day("s", cal, DAY.toordinal(), M0) is first
    docs.page_day("s", "/a", cal, DAY.toordinal(), M0)
    assert [u.collection for u in docs.updates()] == [F.daily.collection, F.rollups.daily.collection]


def test_counts_land_in_the_sites_local_day() -> None:
    """23:30 UTC is the next day in Berlin: its count belongs to that local day."""
    late = M0 + 23 * 60 + 30
    page_days, cells = page_days_of({("s", "/", late): 2, ("s", "/", M0 + 60): 1}, Berlin())
    assert {k[2] for k in page_days} == {DAY.toordinal(), DAY.toordinal() + 1}
    assert [c[2] for c in cells] == [30, 120]  # minutes since the local day's start


def test_a_page_past_the_cap_counts_in_its_sites_day_only_and_is_recorded() -> None:
    caps = PageCaps(max_pages_per_day=1)
    docs = touched(caps)
    counts = {("s", "/a", M0): 3, ("s", "/b", M0 + 1): 2}
    page_days, cells = page_days_of(counts, UTC_SITES)
    rank_top_pages(docs, page_days, caps)
    targets = plan_minutes(docs, cells, caps)
    plan_totals(docs, page_days, targets, caps)
    assert set(docs.page_days) == {("s", "/a", DAY.toordinal())}
    site_day = docs.site_days["s", DAY.toordinal()]
    assert site_day.inc[F.daily.total] == 5 and site_day.inc[F.rollups.daily.capped] == 2
    assert docs.record == {cap_key("s", "/b", DAY.toordinal())}


def test_a_day_past_its_retention_tier_gets_no_minutes_but_keeps_its_hours() -> None:
    class Pruning:
        def calendar(self, site: str) -> Calendar:
            return UTC_SITES.calendar(site)

        def retention(self) -> Pruned:
            return Pruned({"*": DAY.toordinal()}, {})

    docs = touched(calendars=Pruning())
    _, cells = page_days_of({("s", "/", M0 + 61): 1}, Pruning())
    plan_minutes(docs, cells, unlimited())
    (page_day,) = docs.page_days.values()
    assert f"{F.daily.hourly}.1" in page_day.inc and not any(
        k.startswith(F.daily.minute) for k in page_day.inc
    )


def test_totals_fill_months_and_both_top_lists() -> None:
    docs = touched()
    page_days, cells = page_days_of({("s", "/a", M0): 4}, UTC_SITES)
    plan_totals(docs, page_days, plan_minutes(docs, cells, unlimited()), unlimited())
    (page_month,) = docs.page_months.values()
    assert page_month.inc == {F.monthly.total: 4, f"{F.monthly.daily}.{DAY.day}": 4}
    assert len(docs.tops) == 2 and all(sum(t.inc.values()) == 4 for t in docs.tops.values())


def test_properties_go_to_the_page_and_site_days_under_their_keys() -> None:
    class Keys:
        def keys(self, site: str, name: str, value: str) -> tuple[str, str]:
            return f"n{name}", f"v{value}"

    docs = touched()
    plan_props(docs, {("s", "/", M0 // 15): {("c", "DE"): 2}}, Keys())
    assert [u.inc for u in docs.updates()] == [{f"{F.daily.props}.nc.vDE": 2}] * 2


def test_visitors_go_to_the_sketches_of_the_days_their_hits_touched() -> None:
    docs = touched()
    visits = VisitLog.of({("s", "/", M0 // 15): {11, 12}})
    extra = plan_visitors(docs, visits, lambda ordinal: ordinal.to_bytes(8, "big"), Budget(), None)
    assert {u.collection for u in docs.updates()} == {F.daily.collection, F.rollups.daily.collection}
    for upd in docs.updates(*extra):  # each day's sketch, and its hour's
        assert F.daily.visitors in str(upd) and f"{F.daily.hourly_visitors}.0" in str(upd)
