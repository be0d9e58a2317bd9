"""Stored field names: one definition, two modes, and every writer honours the mode (no servers)."""

from __future__ import annotations

import pytest

from pipeline.aggregate.bloom import BloomSpec
from pipeline.aggregate.impressions import ImpressionCounts, impression_fields
from pipeline.aggregate.listens import ListenSketches
from pipeline.aggregate.relations import RelationFilters, relation_sides
from pipeline.ingest.impressions import ImpressionDecoder, ListenDecoder, RelationDecoder
from pipeline.schemas import SCHEMA_MODES, check_mode, collection_kinds, field_names, schema_table


def test_every_kind_has_distinct_short_names_and_readable_names_are_the_keys() -> None:
    for kind in collection_kinds():
        compact, readable = field_names(kind, "compact"), field_names(kind, "readable")
        assert compact["collection"] == readable["collection"]
        fields = [k for k in compact if k != "collection"]
        assert all(readable[k] == k for k in fields)
        short = [compact[k] for k in fields]
        assert len(set(short)) == len(short), kind
        assert all(len(s) <= 2 and "." not in s and not s.startswith("$") for s in short), kind


def test_schema_table_lists_every_field_with_a_meaning() -> None:
    for mode in SCHEMA_MODES:
        rows = schema_table(mode)
        assert {r["collection"] for r in rows} >= {
            "hits_daily",
            "hits_monthly",
            "imp_pairs",
            "listens",
            "preagg_names",
        }
        assert all(r["meaning"] for r in rows)
        assert all(
            (r["stored"] == r["readable"]) == (mode == "readable") or len(r["readable"]) <= 2 for r in rows
        )
    with pytest.raises(ValueError, match="compact, readable"):
        check_mode("short")


@pytest.mark.parametrize("mode", SCHEMA_MODES)
def test_writers_use_the_modes_names(mode: str) -> None:
    f = field_names
    imp = ImpressionCounts(ImpressionDecoder(1000, 300, clock=lambda: 2e9), impression_fields(mode))
    assert imp.ingest(b'{"user": 1, "item": 2, "ts": 1.7e9}') is None
    written = {k for u in imp.plan() for k in (*u.set_on_insert, *u.inc)}
    pairs, daily = f("impression_pairs", mode), f("impression_items_daily", mode)
    assert written == {pairs["user"], pairs["item"], pairs["count"], daily["day"], daily["item"]}

    rel = RelationFilters(RelationDecoder(1000), relation_sides(10, 10, 0.01, mode))
    assert rel.ingest(b'{"user": 1, "item": 2}') is None
    bits = f("relation_users", mode)["bits"]
    assert all(p.startswith(bits + ".") for u in rel.plan() for p in u.bit_or)

    lis = ListenSketches(
        ListenDecoder(1000, 300, clock=lambda: 2e9), 12, BloomSpec.for_capacity(10, 0.01), mode
    )
    assert lis.ingest(b'{"user": 1, "tag": 2, "song": 3, "ts": 1.7e9}') is None
    (upd,) = lis.plan()
    fl = f("listens", mode)
    assert set(upd.set_on_insert) == {fl["user"], fl["tag"]}
    assert upd.compute is not None
    # 1.7e9 is a Tuesday
    assert set(upd.compute(None)) == {f"{fl['slots']}.2", fl["whole"], fl["heard"]}
