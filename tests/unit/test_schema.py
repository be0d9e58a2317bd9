"""Stored field names: one definition, two modes, and every writer honours the mode (no servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.fields import FIELD_MODES, STORE_SCHEMAS, check_mode, documents, field_names, schema_table
from pipeline.kinds import REGISTRY, kind_named
from pipeline.kinds.impressions.aggregate import ImpressionCounts
from pipeline.kinds.impressions.decode import ImpressionDecoder
from pipeline.kinds.impressions.layout import impression_fields
from pipeline.kinds.listens.aggregate import ListenSketches
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.heard import HeardSpec
from pipeline.kinds.relations.aggregate import RelationFilters
from pipeline.kinds.relations.decode import RelationDecoder
from pipeline.kinds.relations.layout import relation_sides

FOLDERS = [kind_named(k).folder for k in REGISTRY] + [STORE_SCHEMAS]


def folder_of(doc: str) -> Path:
    return next(folder for folder in FOLDERS if doc in documents(folder))


def test_every_kind_has_distinct_short_names_and_readable_names_are_the_keys() -> None:
    docs = [(folder, doc) for folder in FOLDERS for doc in documents(folder)]
    collections = [documents(folder)[doc]["collection"] for folder, doc in docs]
    assert len(set(collections)) == len(collections), "two kinds write one collection"
    for folder, kind in docs:
        compact, readable = field_names(folder, kind, "compact"), field_names(folder, kind, "readable")
        assert compact["collection"] == readable["collection"]
        fields = [k for k in compact if k != "collection"]
        assert all(readable[k] == k for k in fields)
        short = [compact[k] for k in fields]
        assert len(set(short)) == len(short), kind
        assert all(len(s) <= 2 and "." not in s and not s.startswith("$") for s in short), kind


def test_schema_table_lists_every_field_with_a_meaning() -> None:
    for mode in FIELD_MODES:
        rows = schema_table(FOLDERS, mode)
        assert {r["collection"] for r in rows} >= {
            "hits_daily",
            "hits_monthly",
            "imp_pairs",
            "listens",
            "preagg_names",
        }
        assert all(r["meaning"] for r in rows)
        own = [(r["stored"].rpartition(".")[2], r["readable"]) for r in rows]  # nested: its own name
        assert all(
            (stored == readable) == (mode == "readable") or len(readable) <= 2 for stored, readable in own
        )
    with pytest.raises(ValueError, match="compact, readable"):
        check_mode("short")


@pytest.mark.parametrize("mode", FIELD_MODES)
def test_writers_use_the_modes_names(mode: str) -> None:
    def f(doc: str, mode: str) -> dict[str, str]:
        return field_names(folder_of(doc), doc, mode)

    imp = ImpressionCounts(ImpressionDecoder(1000, 300, clock=lambda: 2e9), impression_fields(mode))
    assert imp.ingest(b'{"user": 1, "item": 2, "ts": 1.7e9}') is None
    written = {k for u in imp.plan() for k in (*u.set_on_insert, *u.inc)}
    pairs, daily = f("impression_pairs", mode), f("impression_items_daily", mode)
    assert written == {pairs["user"], pairs["item"], pairs["count"], daily["day"], daily["item"]}

    rel = RelationFilters(RelationDecoder(1000), relation_sides(10, 10, 0.01, mode))
    assert rel.ingest(b'{"user": 1, "item": 2}') is None
    bits = f("relation_users", mode)["bits"]
    assert all(p.startswith(bits + ".") for u in rel.plan() for p in u.bit_or)

    lis = ListenSketches(ListenDecoder(1000, 300, clock=lambda: 2e9), 12, HeardSpec(), mode)
    assert lis.ingest(b'{"user": 1, "tag": 2, "song": 3, "ts": 1.7e9}') is None
    upd, top = lis.plan()
    fl, ft = f("listens", mode), f("tops", mode)
    assert set(upd.set_on_insert) == {fl["user"], fl["tag"]}
    assert set(top.set_on_insert) == {ft["user"]} and top.collection == ft["collection"]
    assert upd.compute is not None and top.compute is not None
    # 1.7e9 is a Tuesday
    assert set(upd.compute(None)) == {f"{fl['slots']}.2", fl["whole"]}  # heard: the explicit sketch
    assert set(top.compute(None)) == {ft["tags"]}  # a new summary: its entries as one field
    for song in range(200):  # past the explicit form: the heard filters
        lis.ingest(b'{"user": 1, "tag": 2, "song": %d, "ts": 1.7e9}' % song)
    upd, _top = lis.plan()
    assert upd.compute is not None and fl["filters"] in upd.compute(None)
