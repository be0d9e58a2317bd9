"""Pure parts of what analysts read: the views' declarations, visitor numbers' bookkeeping, the
terminal sparkline, the members' recorded partitions, the shell's URL."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.core.fields import FIELD_MODES
from pipeline.kafka.group import GroupView, Member
from pipeline.kinds import load_kinds
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query_visitors import VisitorRow
from pipeline.kinds.hits.render import sparkline
from pipeline.kinds.hits.visitor_counts import ALL, MAX_PAGES, VisitorCounter, stale
from pipeline.ops.shell import database_url
from pipeline.ops.status import with_recorded

KINDS = ("hits", "listens", "impressions", "relations")


@pytest.mark.parametrize("mode", FIELD_MODES)
def test_each_view_shows_exactly_its_declared_fields(mode: str) -> None:
    for kind in load_kinds(KINDS):
        for view in kind.views(mode):  # type: ignore[arg-type]
            last = view.pipeline[-1]["$project"]
            shown = [k for k, v in last.items() if not (k == "_id" and v == 0)]
            assert shown == [name for name, _, _ in view.fields], view.name


def test_views_never_show_stored_names_or_bookkeeping() -> None:
    f = hits_fields("compact")
    for kind in load_kinds(KINDS):
        for view in kind.views("compact"):
            names = {name for name, _, _ in view.fields}
            assert not names & {"_a", "_id", f.daily.metadata, f.daily.visitors, f.daily.props}, view.name


def test_a_count_is_written_only_when_it_raises_the_figure_or_loses_exactness() -> None:
    f = hits_fields("compact").daily
    assert stale({}, f, 3, True)
    assert not stale({f.visitor_count: 3, f.visitors_exact: True}, f, 3, True)
    assert stale({f.visitor_count: 3, f.visitors_exact: True}, f, 4, True)
    assert not stale({f.visitor_count: 5, f.visitors_exact: False}, f, 4, False)  # $max keeps 5
    assert stale({f.visitor_count: 200, f.visitors_exact: True}, f, 200, False)


def test_the_counter_remembers_pages_per_period_up_to_a_bound() -> None:
    c = VisitorCounter(db=None, fields=hits_fields("compact"), clock=lambda: 0.0)  # type: ignore[arg-type]
    day = date(2026, 10, 25).toordinal()
    c.wrote({("s", day): {"/a", "/b"}})
    c.wrote({("s", day): {"/c"}})
    month = date(2026, 10, 1).toordinal()
    assert c.pages[("s", "d", day)] == {"/a", "/b", "/c"} == c.pages[("s", "m", month)]
    c.wrote({("s", day): {f"/p{i}" for i in range(MAX_PAGES)}})
    assert c.pages[("s", "d", day)] is ALL  # past the bound: every page document of the day is read


def test_a_range_of_days_with_the_daily_salt_is_labelled_a_sum() -> None:
    row = VisitorRow(t=None, visitors=10, exact=True, hits=12, days=4)  # type: ignore[arg-type]
    assert row.sum_of_days(daily_salt=True) and not row.sum_of_days(daily_salt=False)
    assert not VisitorRow(None, 3, True, 3, 1).sum_of_days(True)  # type: ignore[arg-type]


def test_the_sparkline_draws_a_column_per_period_or_says_how_many_it_sums() -> None:
    assert len(sparkline([1] * 96)) == 96  # 4 days of hours: one column each
    line = sparkline([1] * 2880)  # 2 days of minutes
    assert line.endswith("(each column: 30 periods)") and len(line.split()[0]) == 96
    flat = sparkline([5] * 500, unit="minutes").split()[0]
    assert len(set(flat)) == 1  # a flat series stays flat: every column sums as many periods


def test_status_shows_the_partitions_a_worker_recorded_and_unknown_when_the_broker_says_nothing() -> None:
    group = GroupView("g", "Stable", (Member("m1", "c", "/h", ()), Member("m2", "c", "/h", ())), protocol="")
    merged = with_recorded(group, {"m1": ["hits[0]", "hits[1]"]})
    assert [m.partitions for m in merged.members] == [("hits[0]", "hits[1]"), None]
    told = GroupView("g", "Stable", (Member("m2", "c", "/h", ()),), protocol="faust")
    assert with_recorded(told, {}).members[0].partitions == ()  # a broker that says: holds none


def test_the_shell_connects_to_the_deployments_database() -> None:
    assert database_url("mongodb://h:1/", "preagg") == "mongodb://h:1/preagg"
    assert (
        database_url("mongodb://u:p@h:1,h2:2/admin?replicaSet=rs", "x")
        == "mongodb://u:p@h:1,h2:2/x?replicaSet=rs"
    )


@pytest.mark.parametrize("mode", FIELD_MODES)
def test_the_keys_a_view_adds_first_never_shadow_a_stored_field(mode: str) -> None:
    from pipeline.core.fields import SCHEMAS, documents, field_names

    stored = {
        field_names(SCHEMAS / "hits", doc, mode)[name]
        for doc, spec in documents(SCHEMAS / "hits").items()
        for name, field in spec["fields"].items()
        if "in" not in field
    }
    for view in load_kinds(["hits"])[0].views(mode):  # type: ignore[arg-type]
        first = view.pipeline[0]["$project"]
        added = {k for k, v in first.items() if v not in (0, 1)}  # computed, not kept as stored
        assert added and not added & stored, (view.name, added & stored)
        assert not {"n", "minute", "_a", "x", "props"} & set(first) or "bot" in str(view.pipeline)
