"""Unique-visitor sketches as `$max` and `$bit or` fields: exact while small, 2% from 1,000 up."""

from __future__ import annotations

import random
from typing import Any

import pytest
from datasketch import HyperLogLogPlusPlus
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.uniques import (
    EXPLICIT_MAX,
    PARTS,
    Budget,
    Estimate,
    P,
    Parts,
    estimate,
    explicit_fields,
    explicit_hashes,
    register_of,
    register_words,
    signed,
    union,
    unsigned,
)
from pipeline.kinds.hits.visit_log import VisitLog
from pipeline.kinds.hits.visitors import VisitorFieldError, day_key, ident_hash, identity, keyed_hash
from pipeline.testing.sketches import apply_share


def written(hashes: list[int], per_flush: int, budget: Budget | None = None) -> dict[str, Any]:
    """The stored holder after one writer's flushes of ``per_flush`` hashes each."""
    b = budget or Budget()
    doc: dict[str, Any] = {}
    for at in range(0, len(hashes), per_flush):
        apply_share(doc, b.fields("c", 1, "v", set(hashes[at : at + per_flush])))
    return doc.get("v", {})


def test_registers_are_datasketchs() -> None:
    rng = random.Random(1)
    hashes = [rng.getrandbits(64) for _ in range(20_000)]
    hll = HyperLogLogPlusPlus(p=P, hashfunc=lambda x: x)
    for h in hashes:
        hll.update(h)
    reg = [0] * (1 << P)
    for h in hashes:
        i, rank = register_of(h)
        reg[i] = max(reg[i], rank)
    assert reg == list(hll.reg)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_a_hash_survives_bson(h: int) -> None:
    import bson

    key = signed(h)
    assert -(2**63) <= key < 2**63
    assert unsigned(bson.decode(bson.encode({"x": key}))["x"]) == h


@pytest.mark.parametrize("n", [1, 50, EXPLICIT_MAX])
def test_small_sets_are_exact(n: int) -> None:
    rng = random.Random(n)
    hashes = [rng.getrandbits(64) for _ in range(n)]
    got = estimate([written(hashes, 7)])
    assert (got.value, got.exact) == (n, True)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000, 1_000_000])
def test_large_sets_are_within_two_percent(n: int) -> None:
    rng = random.Random(n)
    hashes = [rng.getrandbits(64) for _ in range(n)]
    holder = written(hashes, max(1, n // 20))
    got = estimate([holder], [holder.get("r")])
    assert not got.exact
    assert abs(got.value - n) <= 0.02 * n, (got, n)
    assert len(holder.get("x", {})) <= EXPLICIT_MAX and len(holder["r"]) <= (1 << P) // 4  # bounded


def test_a_flush_written_twice_or_out_of_order_changes_nothing() -> None:
    rng = random.Random(7)
    flushes = [
        Budget().fields("c", 1, "v", {rng.getrandbits(64) for _ in range(k)}) for k in (3, 40, 300, 90)
    ]
    once: dict[str, Any] = {}
    for f in flushes:
        apply_share(once, f)
    again: dict[str, Any] = {}
    for f in [*reversed(flushes), *flushes, flushes[2]]:
        apply_share(again, f)
    assert once == again


def test_a_union_of_exact_holders_is_exact_and_a_set_union() -> None:
    a = {"x": [1, 2, 3]}
    b = {"x": [3, 4]}
    assert estimate([a, b, None]) == estimate([{"x": [1, 2, 3, 4]}])
    assert (estimate([a, b]).value, estimate([a, b]).exact) == (4, True)


def test_a_writer_that_forgets_writes_at_most_the_bound_again() -> None:
    """After a restart (a fresh budget) the explicit part grows by at most one bound."""
    rng = random.Random(3)
    hashes = [rng.getrandbits(64) for _ in range(5_000)]
    doc: dict[str, Any] = {}
    for restart in range(3):
        b = Budget()
        part = hashes[restart * 1_000 : (restart + 1) * 1_000]
        for at in range(0, len(part), 25):
            apply_share(doc, b.fields("c", 1, "v", set(part[at : at + 25])))
    assert len(explicit_hashes(doc["v"]["x"])) <= 3 * EXPLICIT_MAX
    got = estimate([doc["v"]], [doc["v"].get("r")])
    assert abs(got.value - 3_000) <= 0.05 * 3_000


def test_explicit_fields_are_one_chunk_of_signed_hashes_whatever_their_order() -> None:
    """One stored element per flush and holder; the same hashes in any order and with repeats make
    the same chunk, so that ``$addToSet`` of a flush written again adds nothing."""
    (chunk,) = explicit_fields("vh.3", [5, 2**64 - 1])["vh.3.x"]
    assert explicit_fields("vh.3", [2**64 - 1, 5, 5]) == {"vh.3.x": [chunk]}
    assert explicit_hashes([chunk]) == {-1, 5}


def test_an_explicit_form_of_chunks_and_of_integers_written_before_them_reads_as_one_set() -> None:
    older = {"x": [signed(2**64 - 1), 7]}  # a holder written before chunks
    newer = {"x": [7, *explicit_fields("v", [5, 2**64 - 1, 9])["v.x"]]}
    assert (estimate([older, newer]).value, estimate([older, newer]).exact) == (4, True)
    holder, words = union([older, newer])
    assert words == {} and explicit_hashes(holder["x"]) == {-1, 5, 7, 9}


def test_registers_are_thermometers_whose_or_is_the_maximum() -> None:
    rng = random.Random(11)
    a, b = [rng.getrandbits(64) for _ in range(3_000)], [rng.getrandbits(64) for _ in range(3_000)]
    words_a, words_b, words_ab = register_words(a), register_words(b), register_words(a + b)
    ored = {w: words_a.get(w, 0) | words_b.get(w, 0) for w in set(words_a) | set(words_b)}
    assert ored == words_ab
    assert all(0 < m < 2**63 for m in words_ab.values())  # a positive signed int64


def test_who_is_a_visitor() -> None:
    assert identity({"visitor": "u-1", "ip": "1.2.3.4"}) == "v\x00u-1"
    assert identity({"visitor": 42}) == "v\x0042"
    assert identity({"ip": "1.2.3.4", "ua": "Firefox/121.0"}) == "a\x001.2.3.4\x00Firefox/121.0"
    assert identity({"ip": "1.2.3.4", "ua": "Googlebot/2.1"}) is None  # crawlers are no visitors
    assert identity({"site": "s", "page": "/"}) is None
    for bad in ({"visitor": 1.5}, {"ip": ["1"]}, {"ua": "x" * 2000}, {"visitor": True}):
        with pytest.raises(VisitorFieldError):
            identity(bad)


def test_keys_differ_by_day_and_secret_and_hashes_are_stable() -> None:
    from datetime import date

    d1, d2 = date(2026, 11, 1), date(2026, 11, 2)
    assert day_key(b"s" * 32, d1) != day_key(b"s" * 32, d2) != day_key(b"t" * 32, d2)
    assert day_key(b"s" * 32, None) == day_key(b"s" * 32, None)
    i = ident_hash("site", "a\x001.2.3.4\x00ua")
    assert i != ident_hash("other", "a\x001.2.3.4\x00ua")  # one person, two sites: two visitors
    k = day_key(b"s" * 32, d1)
    assert keyed_hash(k, i) == keyed_hash(k, i) != keyed_hash(day_key(b"s" * 32, d2), i)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=400), st.integers(1, 60))
def test_any_split_into_flushes_gives_the_same_count_class(hashes: list[int], per_flush: int) -> None:
    """Exact whenever the writer never switched; an estimate otherwise, never an inflated exact figure."""
    holder = written(hashes, per_flush)
    got = estimate([holder], [holder.get("r")])
    distinct = len(set(hashes))
    if got.exact:
        assert got.value == distinct
    else:
        assert abs(got.value - distinct) <= max(3, 0.1 * distinct)


def _plan(visits: dict[tuple[str, str, int], set[int]], budget: Budget, assumed: Any, record: Any) -> Any:
    from collections import Counter

    from pipeline.core.updates import split_wide
    from pipeline.kinds.hits.aggregate import plan_hits
    from pipeline.kinds.hits.layout import hits_fields

    counts = Counter({(s, p, slot * 15): len(v) for (s, p, slot), v in visits.items()})
    plan = plan_hits(
        counts, hits_fields(), visits=VisitLog.of(visits), visitor_keys=lambda o: b"k" * 32, budget=budget,
        refused=assumed, record=record,
    )  # fmt: skip
    return [(u.collection, u.id, u.part, u.inc, u.max, u.bit_or) for u in split_wide(plan, 64)]


def test_a_flush_written_again_elsewhere_splits_into_the_same_parts() -> None:
    """The worker's budget decides which holders get registers; the intent records it, and a redo
    on a worker with another budget plans the very same upserts, part for part."""
    rng = random.Random(5)
    slot = 29_000_000 // 15
    visits = {("s", f"/p{i}", slot + i % 3): {rng.getrandbits(128) for _ in range(40 * i)} for i in range(6)}
    warm = Budget()
    _plan(visits, warm, None, None)  # this worker wrote to the same holders before
    decided: set[bytes] = set()
    first = _plan(visits, warm, None, decided)
    assert _plan(visits, Budget(), None, None) != first  # another worker would decide otherwise
    again = _plan(visits, Budget(), frozenset(decided), None)
    assert decided and first == again
    assert any(b for *_, b in first) and any(m for *_, m, _ in first)  # registers and explicit both


def test_split_wide_spreads_sketch_fields_too() -> None:
    from pipeline.core.updates import DocUpdate, split_wide

    u = DocUpdate(
        "c", "d", {"m.d": 1}, {f"t.{i}": 1 for i in range(10)},
        max={f"v.x.{i}": True for i in range(100)}, bit_or={f"v.r.{i}": 3 for i in range(50)},
    )  # fmt: skip
    parts = split_wide([u], 64)
    assert [p.part for p in parts] == [0]  # $max paths stay whole in the first part
    assert len(parts[0].max) == 100 and len(parts[0].bit_or) == 50
    wide = split_wide([DocUpdate("c", "d", {"m.d": 1}, bit_or={f"v.r.{i}": 3 for i in range(150)})], 64)
    assert [len(p.bit_or) for p in wide] == [64, 64, 22]
    assert all(p.set_on_insert == {"m.d": 1} for p in wide)  # whichever part inserts it


def test_a_partitions_registers_are_one_field_read_maxed_and_set() -> None:
    """The partition form: applied twice, in either order, or next to the shared form's words, the
    same registers and the same estimate; sparse while few registers are set, bounded when many."""
    from pipeline.core import hll
    from pipeline.core.uniques import merged_blob, register_ranks_of

    rng = random.Random(11)
    a = [rng.getrandbits(64) for _ in range(3_000)]
    b = [rng.getrandbits(64) for _ in range(2_000)] + a[:500]
    ra, rb = register_ranks_of(a), register_ranks_of(b)
    once = merged_blob(merged_blob(None, ra), rb)
    assert hll.decode(once).reg.tolist() == hll.decode(merged_blob(merged_blob(None, rb), ra)).reg.tolist()
    assert merged_blob(once, ra) == once and merged_blob(once, rb) == once  # a redo changes nothing
    truth = len(set(a) | set(b))
    got = estimate([{"o": True}], [once])
    assert not got.exact and abs(got.value - truth) <= 0.03 * truth
    words = {str(w): m for w, m in register_words(b).items()}
    assert estimate([{"o": True}], [merged_blob(None, ra), words]) == got  # the two forms mixed
    assert len(merged_blob(None, register_ranks_of(a[:40]))) == 1 + 3 * 40  # sparse: 3 bytes a register
    assert (
        len(merged_blob(None, register_ranks_of(rng.getrandbits(64) for _ in range(200_000))))
        == 1 + 16_384 * 6 // 8
    )


def test_one_partitions_visitors_go_to_its_field_of_the_partitions_register_document() -> None:
    """A plan of one source partition writes each busy holder's registers as a read-modify-write of
    its own field of the partitions' document, which the holder lists (``w``: PARTS) for readers."""
    from collections import Counter

    from pipeline.kinds.hits.aggregate import plan_hits
    from pipeline.kinds.hits.layout import hits_fields, register_id

    rng = random.Random(12)
    slot = 29_000_000 // 15
    visits = VisitLog.of({("s", "/", slot): {rng.getrandbits(128) for _ in range(500)}})
    counts = Counter({("s", "/", slot * 15): 500})
    plan = plan_hits(
        counts, hits_fields(), visits=visits, visitor_keys=lambda o: b"k" * 32, budget=Budget(), writer=3
    )
    regs = [u for u in plan if u.collection == "hits_visitor_registers"]
    page = next(u for u in plan if u.collection == "hits_daily")
    assert regs and all(u.compute is not None and not u.bit_or and u.before for u in regs)
    assert register_id("hits_daily", page.id, "v", PARTS) in {u.id for u in regs}
    assert page.add_to_set["v.w"] == [PARTS] and page.max["v.o"] is True
    assert all(u.owned for u in regs)  # partition 3's own field: merged with the others'
    stored = regs[0].compute(None)["p.3"]
    assert regs[0].compute({"p": {"3": stored}}) == {"p.3": stored}  # read, maxed, set: idempotent
    shared = plan_hits(
        counts, hits_fields(), visits=visits, visitor_keys=lambda o: b"k" * 32, budget=Budget()
    )
    shared_regs = [u for u in shared if u.collection == "hits_visitor_registers"]
    assert shared_regs and all(u.compute is None and u.bit_or and u.before for u in shared_regs)
    # the shared form is listed too (SHARED), so that a folded holder's reader finds it
    assert next(u for u in shared if u.collection == "hits_daily").add_to_set["v.w"] == [-1]


def test_a_folded_holder_reads_as_its_registers_did() -> None:
    """Folding (``f``: the register documents' maximum, with what ``f`` held) changes no estimate;
    a folded holder nobody wrote since has no register document to read, one written since lists
    its writers' documents, a never-folded one also reads the shared document."""
    from pipeline.core.uniques import folded, merged_blob, pending, register_ranks_of
    from pipeline.kinds.hits.layout import register_id
    from pipeline.kinds.hits.registers import register_ids

    rng = random.Random(13)
    a, b, c = ([rng.getrandbits(64) for _ in range(n)] for n in (3_000, 2_000, 700))
    holder: dict[str, Any] = {"o": True, "w": [0, 2, -1], "x": [signed(h) for h in c[:100]]}
    regs = [merged_blob(None, register_ranks_of(a)), merged_blob(None, register_ranks_of(b))]
    words = {str(w): m for w, m in register_words(c[100:]).items()}
    before = estimate([holder], [*regs, words])
    assert register_ids("d", "k", "v", holder) == [
        register_id("d", "k", "v"),
        register_id("d", "k", "v", 0),
        register_id("d", "k", "v", 2),
    ]
    done = {"o": True, "x": holder["x"], "f": folded(holder, [*regs, words])}
    assert estimate([done]) == before and not pending(done) and register_ids("d", "k", "v", done) == []
    assert folded(done, [regs[0]]) == done["f"]  # folded again: the same bytes
    later = {**done, "w": [1]}
    more = merged_blob(None, register_ranks_of(rng.getrandbits(64) for _ in range(1_000)))
    assert pending(later) and register_ids("d", "k", "v", later) == [register_id("d", "k", "v", 1)]
    assert estimate([later], [more]).value > before.value
    assert estimate([{**done, "f": folded(done, [more])}]) == estimate([later], [more])
    assert not pending({"x": [1, 2]}) and pending({"o": True})  # never folded: the shared document


def test_register_documents_are_written_before_the_statements_that_list_them() -> None:
    """A flush's ``before`` updates go in a bulk of their own, acknowledged before the others."""
    from pipeline.core.updates import DocUpdate, split_wide
    from pipeline.store.statements import phases

    plain = [DocUpdate("a", 1, {}), DocUpdate("a", 2, {})]
    assert phases(plain) == [plain]
    reg = DocUpdate("r", "x", {}, bit_or={f"r.{i}": 1 for i in range(10)}, before=True)
    assert phases([plain[0], reg, plain[1]]) == [[reg], [plain[0], plain[1]]]
    assert all(part.before for part in split_wide([reg], 4))


def test_every_part_of_a_split_document_inserts_it_whole() -> None:
    """Another writer's part 2 may insert the document before this part 0 arrives as an update:
    each part carries the metadata ($setOnInsert), or the document would lack its date for good."""
    from pipeline.core.updates import DocUpdate, split_wide

    meta = {"m.d": "2026-11-26", "m.s": "shop.example"}
    parts = split_wide([DocUpdate("c", "d", meta, {f"n.{i}": 1 for i in range(150)})], 64)
    assert len(parts) == 3 and all(p.set_on_insert == meta for p in parts)


def test_a_site_rollups_registers_stay_in_it_one_field_per_partition() -> None:
    """A site's day and month keep a partition's registers in their holder (``b.<partition>``, read,
    maxed and set by the rollup's own update): no register document, nothing listed, one document
    a day to read; its pages and hours keep documents of their own, and so do partitions past
    the inline bound. Readers and folds take ``b`` as registers."""
    from collections import Counter

    from pipeline.core.uniques import folded, pending
    from pipeline.kinds.hits.aggregate import plan_hits
    from pipeline.kinds.hits.layout import hits_fields
    from pipeline.kinds.hits.registers import register_ids
    from pipeline.kinds.hits.visits import INLINE_PARTITIONS

    rng = random.Random(14)
    slot = 29_000_000 // 15
    hashes = {rng.getrandbits(128) for _ in range(500)}
    visits = VisitLog.of({("s", "/", slot): hashes})
    counts = Counter({("s", "/", slot * 15): 500})
    f = hits_fields()
    rd, rm = f.rollups.daily, f.rollups.monthly

    def plan(writer: int) -> list[Any]:
        return plan_hits(
            counts, f, visits=visits, visitor_keys=lambda o: b"k" * 32, budget=Budget(), writer=writer
        )

    mine = plan(3)
    rollups = [u for u in mine if u.collection in (rd.collection, rm.collection)]
    assert len(rollups) == 2 and all(u.compute is not None and u.max["v.o"] is True for u in rollups)
    assert all("v.w" not in u.add_to_set for u in rollups)  # nothing listed: nothing to read apart
    regs = {u.id for u in mine if u.collection == "hits_visitor_registers"}
    assert regs and not any(i.startswith(rd.collection + "|v|") or i.startswith(rm.collection) for i in regs)
    day = next(u for u in rollups if u.collection == rd.collection)
    first = day.compute(None)
    assert list(first) == ["v.b.3"]
    stored = {"v": {"o": True, "b": {"3": first["v.b.3"]}}}
    assert day.compute(stored) == first  # read, maxed, set: a redo changes nothing
    holder = stored["v"]
    assert register_ids(rd.collection, day.id, "v", holder) == [] and pending(holder)
    got = estimate([holder])
    assert not got.exact and abs(got.value - len(hashes)) <= 0.05 * len(hashes)
    other = {"o": True, "b": {**holder["b"], "7": folded({}, [])}}
    assert estimate([other]) == got
    done = {"o": True, "f": folded(holder, [])}
    assert estimate([done]) == got and not pending(done)
    assert folded(holder, []) == folded({}, [bytes(first["v.b.3"])])
    far = plan(INLINE_PARTITIONS)  # past the bound: documents of their own, listed
    far_day = next(u for u in far if u.collection == rd.collection)
    assert far_day.compute is None and far_day.add_to_set["v.w"] == [PARTS]


def test_partitions_registers_merge_into_one_write_per_holder() -> None:
    """Two partitions' plans of the same busy page: one register update per holder, whose compute
    sets each partition's field; each share resolved alone sets the same fields (a share sent
    apart after its document held the other's marks), and the stored parts read as the union."""

    from pipeline.core.updates import merge_sources
    from pipeline.kinds.hits.layout import hits_fields, register_fields
    from pipeline.kinds.hits.registers import registers_filter, stored_registers
    from pipeline.store.idempotent_commit import _resolved

    rng = random.Random(17)
    a, b = ({rng.getrandbits(128) for _ in range(400)} for _ in range(2))
    merged = merge_sources(partitions_planned({3: a, 5: b}))
    rf = register_fields()
    regs = [u for u in merged if u.collection == rf.collection]
    assert regs and len(regs) == len({u.id for u in regs})  # one write per holder
    assert all(u.sources == (("hits", 3), ("hits", 5)) and u.owned for u in regs)
    one = _resolved(regs[0], None)
    assert set(one.set) == {"p.3", "p.5"} and one.compute is None
    assert [s.set for s in one.shares] == [{"p.3": one.set["p.3"]}, {"p.5": one.set["p.5"]}]
    stored = {"_id": one.id, "p": {"3": one.set["p.3"], "5": one.set["p.5"]}}
    parts = stored_registers(stored, rf)
    as_read = {"p": {k: bytes(v) for k, v in stored["p"].items()}}
    assert isinstance(parts, Parts) and registers_filter(rf, parts) == as_read
    # the rollup's day: each partition's registers in it, counters added, one write
    day = [u for u in merged if u.collection == hits_fields().rollups.daily.collection]
    assert len(day) == 1 and day[0].inc and set(_resolved(day[0], None).set) >= {"v.b.3", "v.b.5"}
    got = estimate([{"o": True}], [parts])
    truth = len(a | b)
    assert not got.exact and abs(got.value - truth) <= 0.05 * truth
    assert estimate([{"o": True}], [bytes(stored["p"]["3"]), bytes(stored["p"]["5"])]) == got


def test_partitions_merged_write_one_explicit_element_per_holder() -> None:
    """Two partitions' explicit hashes of one holder, merged, are one ``$addToSet`` element:
    their union. A share written again apart (its next owner) adds its own element, and the
    count is the same."""

    from pipeline.core.uniques import PackedInts
    from pipeline.core.updates import merge_sources

    rng = random.Random(23)
    a = {rng.getrandbits(128) for _ in range(40)}
    b = set(list(a)[:15]) | {rng.getrandbits(128) for _ in range(25)}
    merged = [u for u in merge_sources(partitions_planned({1: a, 2: b})) if len(u.sources) == 2]
    paths = [(u, p) for u in merged for p in u.add_to_set if p.endswith(".x")]
    assert "v.x" in {p for _, p in paths} and any(p.startswith("vh.") for _, p in paths)
    for u, path in paths:
        (element,) = u.add_to_set[path]
        assert isinstance(element, PackedInts)
        shares = [v for s in u.shares for v in s.add_to_set[path]]
        assert explicit_hashes([element]) == explicit_hashes(shares)
        assert estimate([{"x": [element]}]) == Estimate(len(a | b), True)
        assert estimate([{"x": [element, shares[-1]]}]) == Estimate(len(a | b), True)


def partitions_planned(visitors: dict[int, set[int]]) -> list[Any]:
    """Each partition's plan of one page's quarter hour seen by ``visitors`` (partition → its
    visitors' in-memory hashes), with its source."""
    from collections import Counter

    from pipeline.kinds.hits.aggregate import plan_hits
    from pipeline.kinds.hits.layout import hits_fields

    slot = 29_000_000 // 15
    plans = []
    for writer, idents in visitors.items():
        plan = plan_hits(
            Counter({("s", "/", slot * 15): len(idents)}),
            hits_fields(),
            visits=VisitLog.of({("s", "/", slot): idents}),
            visitor_keys=lambda o: b"k" * 32,
            budget=Budget(),
            writer=writer,
        )
        for u in plan:
            u.sources = (("hits", writer),)
        plans.extend(plan)
    return plans
